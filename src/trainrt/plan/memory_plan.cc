#include "trainrt/plan/memory_plan.h"
