// Fixture: kv/ including engine/ must fail the layering check.
#include "engine/engine.h"
