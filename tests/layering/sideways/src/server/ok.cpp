// Fixture: server/ including the shared HTTP floor is allowed.
#include "http/http_transport.h"
