// The stage API of a node that samples LeRobot datasets (EpisodeSampler): commands that work on a
// pipeline's data, such as `text-cache build`, find such nodes by this interface, not by type name.
#pragma once

#include <string>
#include <vector>

namespace wam::stages {

class DatasetSampler {
 public:
  virtual ~DatasetSampler() = default;
  // The dataset directories the node samples, as its params name them.
  virtual const std::vector<std::string>& dataset_dirs() const = 0;
};

}  // namespace wam::stages
