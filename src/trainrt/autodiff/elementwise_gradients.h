// The gradient rule files of the elementwise family; register_elementwise_gradients
// (register_gradients.h, defined in elementwise_gradients.cc with the arithmetic rules) calls these.
//
//   activation_gradients.cc  Relu, LeakyRelu, Sigmoid, Tanh, Erf, Gelu, Softplus, Elu, Selu, HardSigmoid
#pragma once

namespace trainrt {

class GradientRegistry;

void register_activation_gradients(GradientRegistry& r);

}  // namespace trainrt
