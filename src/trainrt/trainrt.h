// TrainRT's public C++ API, for applications that link the installed package:
//
//   find_package(TrainRT CONFIG REQUIRED)
//   target_link_libraries(app PRIVATE TrainRT::trainrt)
//
// The API is these headers:
//   trainrt/ir/onnx_import.h         import_onnx: an ONNX file (external data, local functions) as a Graph
//   trainrt/train/loss_builder.h     append_loss: a cross-entropy or MSE loss and its label input
//   trainrt/train/training_session.h TrainingSession: train, evaluate, step, export the inference model
//   trainrt/train/checkpoint.h       CheckpointState: parameters and optimizer state, saved and loaded
//   trainrt/runtime/session.h        Session: run a graph (inference), planned once per input signature
//   trainrt/core/error.h             the exceptions every call may throw (InvalidModel, ShapeError, ...)
// The other installed headers are there because these include them; they are not API and change
// without notice. examples/cpp/train_onnx.cc shows the whole loop.
#pragma once

#include "trainrt/core/error.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/runtime/session.h"
#include "trainrt/train/checkpoint.h"
#include "trainrt/train/loss_builder.h"
#include "trainrt/train/training_session.h"
