// Fixture: router/ including server/ (one front end including another) must fail the check.
#include "server/server.h"
