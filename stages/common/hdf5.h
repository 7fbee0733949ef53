// Small helpers over HDF5's C API shared by the HDF5 readers and writers (episode data, text
// cache): errors carry HDF5's own message and the path, handles close themselves.
#pragma once

#include <hdf5.h>

#include <string>

#include "wam/error.h"

namespace wam::hdf5 {

// HDF5 prints its error stack to stderr by default; our errors carry the messages instead.
void silence_errors();

// The innermost messages of HDF5's current error stack, e.g. "unable to open file"; clears it.
std::string error_message();

// Returns `result`, or throws wam::Error "<path> (dataset <d>): HDF5 cannot <what>: <message>".
template <class T>
T check(T result, const std::string& what, const std::string& path,
        const std::string& dataset = {}) {
  if (result < 0) {
    throw Error(path + (dataset.empty() ? "" : " (dataset " + dataset + ")") + ": HDF5 cannot " +
                what + ": " + error_message());
  }
  return result;
}

// Owns an HDF5 id and closes it with the matching H5*close.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

}  // namespace wam::hdf5
