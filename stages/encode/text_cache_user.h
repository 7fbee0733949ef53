// The stage API of a node that reads the HDF5 text cache (TextEmbed): `text-cache build` finds such
// nodes by this interface, not by type name, and fills the cache each one reads.
#pragma once

#include "models/text_encoder.h"

namespace wam::stages {

class TextCacheUser {
 public:
  virtual ~TextCacheUser() = default;
  // Where the cache is and which encoder fills it.
  virtual const models::TextCacheParams& text_cache() const = 0;
};

}  // namespace wam::stages
