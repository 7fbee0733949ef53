// The stage interface of a training step: `wam-pipeline bench` and `compile` find the node that
// trains by it, not by its type name, so a user's own step stage is measured the same way.
#pragma once

namespace wam::stages {

class TrainingStep {
 public:
  virtual ~TrainingStep() = default;
  // Whether the step runs as a captured (compiled) graph; bench and compile report it.
  virtual bool compiled() const = 0;
};

}  // namespace wam::stages
