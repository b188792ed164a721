#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {

void register_elementwise_grad_schemas(OpRegistry& r) {}

}  // namespace trainrt
