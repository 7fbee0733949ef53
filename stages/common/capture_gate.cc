#include "common/capture_gate.h"

namespace wam {

CaptureGate& capture_gate() {
  static CaptureGate gate;
  return gate;
}

}  // namespace wam
