// The stage API of a node that samples LeRobot datasets (EpisodeSampler): commands that work on a
// pipeline's data, such as `text-cache build` and `validate --data`, find such nodes by this
// interface, not by type name.
#pragma once

#include <string>
#include <vector>

#include "data/episode_sampler_params.h"

namespace wam::stages {

class DatasetSampler {
 public:
  virtual ~DatasetSampler() = default;
  // The dataset directories the node samples, as its params name them.
  virtual const std::vector<std::string>& dataset_dirs() const = 0;
  // All of its params, with defaults filled in (`validate --data` checks them against the data).
  virtual const EpisodeSamplerParams& sampler_params() const = 0;
};

}  // namespace wam::stages
