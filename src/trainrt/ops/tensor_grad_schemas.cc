#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {

void register_tensor_grad_schemas(OpRegistry& r) {}

}  // namespace trainrt
