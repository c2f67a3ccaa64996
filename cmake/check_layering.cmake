# The layering check (../shared/docs/architecture.md, "Layers and the one rule between them"):
# a file in src/<module>/ may include only headers of its own module and of the modules below
# it, listed here. Run by the build (target `layering`, part of ALL): an upward include fails
# the build with the file, the line and the rule.
#   cmake -DSRC=<repo>/src -DSTAMP=<file> -P check_layering.cmake
set(allowed_base "")
set(allowed_gguf "base")
set(allowed_tokenizer "base;gguf")
set(allowed_template "base")
set(allowed_kernels "base;gguf")
set(allowed_model "base;gguf;kernels")
# The plumbing floor: sockets with deadlines, the HTTP server and its errors, the K/V transfer
# and disk tier (files and sockets beside kv/, which stays block ids only).
set(allowed_net "base")
set(allowed_http "base;net")
set(allowed_kv_io "base;net")
set(allowed_kv "base")
set(allowed_sched "base;kv")
set(allowed_grammar "base")
set(allowed_sample "base;grammar")
# Quality judged on text: perplexity and KL divergence statistics, the saved-logits file.
set(allowed_eval "base")
set(allowed_perf "base")
set(allowed_executor "base;gguf;kernels;model;perf")
set(allowed_parallel "base;gguf;kernels;model;perf;executor")
set(allowed_speculative "base;gguf;tokenizer;kernels;model;kv;sched;grammar;sample;perf;executor")
set(allowed_engine "base;gguf;tokenizer;kernels;model;kv;sched;grammar;sample;perf;executor;speculative")
set(allowed_hub "base")
# Front ends (cli/ server/ router/ loadgen/ sim/) never include each other; cli/ is the one
# exception: it wires them all into the `sluice` executable.
set(allowed_server "base;net;http;kv_io;gguf;tokenizer;template;kernels;model;kv;sched;grammar;sample;perf;executor;speculative;engine")
set(allowed_router "base;net;http")
set(allowed_loadgen "base;net;http;gguf;tokenizer")
# sim/ replays a workload through the real engine behind the router's policies: it reuses
# router/policy.h (the pure pick function, no sockets) and loadgen/metrics.h (the same TTFT/TPOT
# summaries the load generator reports), the two edges between front ends the table allows.
set(allowed_sim "base;gguf;tokenizer;template;kernels;model;kv;sched;grammar;sample;perf;executor;speculative;engine;loadgen;router")
set(allowed_cli "base;net;http;kv_io;gguf;tokenizer;template;kernels;model;kv;sched;grammar;sample;eval;perf;executor;parallel;speculative;engine;server;hub;loadgen;router;sim")

file(GLOB modules RELATIVE ${SRC} ${SRC}/*)
set(errors "")
foreach(m ${modules})
  if(NOT IS_DIRECTORY ${SRC}/${m})
    continue()
  endif()
  if(NOT DEFINED allowed_${m})
    string(APPEND errors "src/${m}/: a module the layering table (cmake/check_layering.cmake) does not know\n")
    continue()
  endif()
  file(GLOB_RECURSE files ${SRC}/${m}/*.h ${SRC}/${m}/*.cpp ${SRC}/${m}/*.inc)
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_0-9]+/")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z_0-9]+)/.*" "\\1" dep "${line}")
      if(dep STREQUAL m OR NOT IS_DIRECTORY ${SRC}/${dep})
        continue()
      endif()
      list(FIND allowed_${m} ${dep} found)
      if(found EQUAL -1)
        file(RELATIVE_PATH rel ${SRC}/.. ${f})
        string(APPEND errors "${rel}: `${line}`: ${m}/ may not include ${dep}/ (allowed: ${allowed_${m}})\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(errors)
  message(FATAL_ERROR "layering check failed (architecture.md: a module uses only modules below it):\n${errors}")
endif()
if(STAMP)
  file(WRITE ${STAMP} "ok\n")
endif()
