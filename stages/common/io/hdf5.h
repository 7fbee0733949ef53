// Small helpers over HDF5's C API shared by the HDF5 readers and writers (latent store, text
// cache): errors carry HDF5's own message and the path, handles close themselves, and scalar
// attributes are read and written one way.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
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

// Scalar attributes of a file, group or dataset. Strings are written in one encoding, variable-
// length UTF-8 (what h5py writes for a Python str); reading also accepts fixed-length strings,
// null-padded or null-terminated, which the text cache wrote before, so that files written either
// way stay readable. Reads return nothing when the attribute is absent and throw wam::Error
// "<path>: attribute <name> is not a string" (or "not an integer") for another type.
void write_string_attribute(hid_t object, const std::string& name, const std::string& value,
                            const std::string& path);
std::optional<std::string> read_string_attribute(hid_t object, const std::string& name,
                                                 const std::string& path);
void write_int_attribute(hid_t object, const std::string& name, int64_t value,
                         const std::string& path);
std::optional<int64_t> read_int_attribute(hid_t object, const std::string& name,
                                          const std::string& path);

}  // namespace wam::hdf5
