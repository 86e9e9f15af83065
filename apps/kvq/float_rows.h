#pragma once
// K/V rows of a safetensors file as float32 on the host, and the error figures `kvq read
// --compare` and `kvq calibrate` print: relative L2 error and max absolute error.
#include <cstdint>
#include <string>
#include <vector>

#include "kvq/io/safetensors.h"

namespace kvq::app {

// The elements of `t` (BF16, F16 or F32) as floats; throws kvq::Error (invalid_argument) naming
// `source` and the tensor for any other dtype.
std::vector<float> to_floats(const SafetensorsTensor& t, const std::string& source);

struct ErrorFigures {
  double relative = 0;  // ||x - y|| / ||x|| over the elements compared (0 when ||x|| is 0)
  double max = 0;       // max |x - y|
  int64_t elements = 0;
};

// Accumulates the figures over pairs (reference x, result y); non-finite pairs are skipped.
class ErrorAccumulator {
 public:
  void add(double x, double y);
  ErrorFigures figures() const;

 private:
  double diff2_ = 0, ref2_ = 0, max_ = 0;
  int64_t n_ = 0;
};

}  // namespace kvq::app
