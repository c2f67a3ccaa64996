# gzip -9 of one file IN (relative to the working directory) into OUT; used by embed_webui.cmake.
file(ARCHIVE_CREATE OUTPUT "${OUT}" PATHS "${IN}" FORMAT raw COMPRESSION GZip COMPRESSION_LEVEL 9)
