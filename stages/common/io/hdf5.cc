#include "common/io/hdf5.h"

namespace wam::hdf5 {

void silence_errors() {
  static const bool silenced = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)silenced;
}

std::string error_message() {
  std::string message;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto* out = static_cast<std::string*>(data);
        if (!out->empty()) *out += "; ";
        *out += e->desc ? e->desc : "?";
        return 0;
      },
      &message);
  H5Eclear2(H5E_DEFAULT);
  return message.empty() ? "unknown HDF5 error" : message;
}

namespace {

// The attribute, or an empty handle when `object` has none of that name.
Handle open_attribute(hid_t object, const std::string& name, const std::string& path) {
  if (check(H5Aexists(object, name.c_str()), "check attribute " + name, path) <= 0) {
    return Handle(-1, H5Aclose);
  }
  return Handle(check(H5Aopen(object, name.c_str(), H5P_DEFAULT), "open attribute " + name, path),
                H5Aclose);
}

void write_scalar_attribute(hid_t object, const std::string& name, hid_t file_type,
                            hid_t memory_type, const void* value, const std::string& path) {
  Handle space(check(H5Screate(H5S_SCALAR), "create a dataspace", path), H5Sclose);
  Handle attribute(
      check(H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
            "create attribute " + name, path),
      H5Aclose);
  check(H5Awrite(attribute.get(), memory_type, value), "write attribute " + name, path);
}

}  // namespace

void write_string_attribute(hid_t object, const std::string& name, const std::string& value,
                            const std::string& path) {
  Handle type(check(H5Tcopy(H5T_C_S1), "copy a string type", path), H5Tclose);
  check(H5Tset_size(type.get(), H5T_VARIABLE), "size a string type", path);
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "set a string's character set", path);
  const char* text = value.c_str();
  write_scalar_attribute(object, name, type.get(), type.get(), &text, path);
}

std::optional<std::string> read_string_attribute(hid_t object, const std::string& name,
                                                 const std::string& path) {
  const Handle attribute = open_attribute(object, name, path);
  if (attribute.get() < 0) return std::nullopt;
  Handle type(check(H5Aget_type(attribute.get()), "read the type of attribute " + name, path),
              H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) {
    throw Error(path + ": attribute " + name + " is not a string");
  }
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle memory_type(check(H5Tcopy(H5T_C_S1), "copy a string type", path), H5Tclose);
    check(H5Tset_size(memory_type.get(), H5T_VARIABLE), "size a string type", path);
    check(H5Tset_cset(memory_type.get(), H5Tget_cset(type.get())), "set a character set", path);
    char* value = nullptr;
    check(H5Aread(attribute.get(), memory_type.get(), &value), "read attribute " + name, path);
    std::string text = value ? value : "";
    H5free_memory(value);
    return text;
  }
  // Read in the file's own type: a memory type of another padding could drop the last character
  // of a string that fills its size.
  std::string text(H5Tget_size(type.get()), '\0');
  check(H5Aread(attribute.get(), type.get(), text.data()), "read attribute " + name, path);
  return text.substr(0, text.find('\0'));
}

void write_int_attribute(hid_t object, const std::string& name, int64_t value,
                         const std::string& path) {
  write_scalar_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, path);
}

std::optional<int64_t> read_int_attribute(hid_t object, const std::string& name,
                                          const std::string& path) {
  const Handle attribute = open_attribute(object, name, path);
  if (attribute.get() < 0) return std::nullopt;
  Handle type(check(H5Aget_type(attribute.get()), "read the type of attribute " + name, path),
              H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) {
    throw Error(path + ": attribute " + name + " is not an integer");
  }
  int64_t value = 0;
  check(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), "read attribute " + name, path);
  return value;
}

}  // namespace wam::hdf5
