// Anchors the built-in stage objects into every binary that links wam_stages.
#include "wam/registry.h"
