// The stage interface of a training step: `wam-pipeline bench` and `compile` find the node that
// trains by it, not by its type name, and turn its training state off through it, so a user's own
// step stage is measured the same way.
#pragma once

#include "wam/pipeline.h"

namespace wam::stages {

class TrainingStep {
 public:
  virtual ~TrainingStep() = default;
  // Whether the step runs as a captured (compiled) graph; bench and compile report it.
  virtual bool compiled() const = 0;
  // From now on saves no training state and resumes none, whatever its params say: bench and
  // compile run steps to measure or prepare them, not to train. Called before open().
  virtual void disable_training_state() = 0;
};

// Calls disable_training_state() on every training step of `pipeline`, before it runs.
inline void disable_training_state(const ValidatedPipeline& pipeline) {
  for (const ValidatedNode& node : pipeline.nodes()) {
    if (auto* step = dynamic_cast<TrainingStep*>(node.stage.get())) step->disable_training_state();
  }
}

}  // namespace wam::stages
