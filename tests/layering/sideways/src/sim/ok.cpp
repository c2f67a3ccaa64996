// Fixture: sim/ reusing the router's policy is the one front-end edge the table allows.
#include "router/policy.h"
