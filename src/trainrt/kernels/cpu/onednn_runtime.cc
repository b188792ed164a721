#include "trainrt/kernels/cpu/onednn_runtime.h"

#include <omp.h>

namespace trainrt {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine& engine = *new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

void onednn_execute(const dnnl::primitive& primitive, std::span<const dnnl_exec_arg_t> args) {
  dnnl::stream& stream = onednn_stream();
  dnnl::error::wrap_c_api(
      dnnl_primitive_execute(primitive.get(), stream.get(), static_cast<int>(args.size()), args.data()),
      "could not execute a primitive");
  stream.wait();
}

SingleThreadedOpenMp::SingleThreadedOpenMp() : saved_(omp_get_max_threads()) {
  if (saved_ != 1) omp_set_num_threads(1);
}

SingleThreadedOpenMp::~SingleThreadedOpenMp() {
  if (saved_ != 1) omp_set_num_threads(saved_);
}

}  // namespace trainrt
