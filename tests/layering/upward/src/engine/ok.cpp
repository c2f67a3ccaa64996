// Fixture: engine/ including kv/ is allowed.
#include "kv/bad.h"
