// Fixture: http/ exists, so that server/ok.cpp's include of it is checked.
