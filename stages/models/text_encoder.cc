#include "models/text_encoder.h"

#include "common/io/hdf5.h"

#include <hdf5.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/io/sha256.h"
#include "models/frozen_encoder.h"
#include "wam/atomic_file.h"
#include "wam/error.h"

namespace wam::models {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kEndByteToken = 1;
constexpr int64_t kByteOffset = 2;
constexpr int64_t kByteVocab = 256 + kByteOffset;
constexpr size_t kEncodeChunk = 16;

std::string rebuild_hint() { return "run wam-pipeline text-cache build PIPELINE"; }

// ---- HDF5 -------------------------------------------------------------------------------------

using H5Handle = hdf5::Handle;

template <class T>
T h5_check(T result, const std::string& what, const std::string& path) {
  return hdf5::check(result, what, path);
}

hid_t open_for_reading(const std::string& path) {
  hdf5::silence_errors();
  return h5_check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "open the text cache", path);
}

// The cache's own attributes, required: a file without them was not written by text-cache build.
int64_t required_int_attribute(hid_t object, const char* name, const std::string& path) {
  const std::optional<int64_t> value = hdf5::read_int_attribute(object, name, path);
  if (!value) {
    throw Error("TextEmbed: text cache " + path + " has no attribute " + name + ": " +
                rebuild_hint());
  }
  return *value;
}

std::string required_string_attribute(hid_t object, const char* name, const std::string& path) {
  const std::optional<std::string> value = hdf5::read_string_attribute(object, name, path);
  if (!value) {
    throw Error("TextEmbed: text cache " + path + " has no attribute " + name + ": " +
                rebuild_hint());
  }
  return *value;
}

void write_array(hid_t group, const char* name, hid_t file_type, hid_t memory_type,
                 const std::vector<hsize_t>& dims, const void* values, const std::string& path) {
  H5Handle space(h5_check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                          "create a dataspace", path),
                 H5Sclose);
  H5Handle dataset(h5_check(H5Dcreate2(group, name, file_type, space.get(), H5P_DEFAULT,
                                       H5P_DEFAULT, H5P_DEFAULT),
                            std::string("create dataset ") + name, path),
                   H5Dclose);
  h5_check(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values),
           std::string("write dataset ") + name, path);
}

// Reads a dataset whose shape must be `dims` into `values`.
void read_array(hid_t group, const std::string& name, hid_t memory_type,
                const std::vector<hsize_t>& dims, void* values, const std::string& path) {
  H5Handle dataset(
      h5_check(H5Dopen2(group, name.c_str(), H5P_DEFAULT), "open dataset " + name, path), H5Dclose);
  H5Handle space(h5_check(H5Dget_space(dataset.get()), "read a dataspace", path), H5Sclose);
  std::vector<hsize_t> stored(dims.size());
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank == static_cast<int>(dims.size())) {
    H5Sget_simple_extent_dims(space.get(), stored.data(), nullptr);
  }
  if (rank != static_cast<int>(dims.size()) || stored != dims) {
    throw Error(path + ": dataset " + name + " does not have the expected shape; " +
                rebuild_hint());
  }
  h5_check(H5Dread(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values),
           "read dataset " + name, path);
}

std::vector<std::string> list_entries(hid_t file, const std::string& path) {
  std::vector<std::string> names;
  h5_check(H5Literate(
               file, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
               [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
                 static_cast<std::vector<std::string>*>(data)->push_back(name);
                 return 0;
               },
               &names),
           "list the entries", path);
  return names;
}

// ---- Encoders ---------------------------------------------------------------------------------

class ByteTextEncoderImpl : public torch::nn::Module {
 public:
  ByteTextEncoderImpl(const TextCacheParams& p) : head_dim_(p.width / p.heads) {
    embed_ = register_module("embed", torch::nn::Embedding(kByteVocab, p.width));
    for (int64_t i = 0; i < p.layers; ++i) {
      layers_.push_back(
          register_module("layer" + std::to_string(i),
                          EncoderBlock(BlockShape{p.width, p.heads, 0, 0, p.ffn, /*gated=*/true,
                                                  /*gelu=*/p.activation == "gelu"})));
    }
    norm_ = register_module("norm", RMSNorm(p.width));
    project_ = register_module("project",
                               torch::nn::Linear(torch::nn::LinearOptions(p.width, p.text_dim)));
  }

  // token_ids [N, 128] -> [N, 128, text_dim]; bidirectional attention over the valid tokens.
  at::Tensor forward(const at::Tensor& token_ids) {
    const at::Tensor positions =
        torch::arange(kTextTokens, token_ids.options()).expand({3, kTextTokens});
    const auto [cos, sin] = rope_tables(positions, head_dim_);
    const at::Tensor bias = key_padding_bias(token_ids != 0, at::kFloat);
    at::Tensor x = embed_(token_ids);
    for (auto& layer : layers_) x = layer(x, cos, sin, bias);
    return project_(norm_(x));
  }

 private:
  int64_t head_dim_;
  torch::nn::Embedding embed_{nullptr};
  std::vector<EncoderBlock> layers_;
  RMSNorm norm_{nullptr};
  torch::nn::Linear project_{nullptr};
};
TORCH_MODULE(ByteTextEncoder);

TextContext masked(const at::Tensor& hidden, const at::Tensor& token_ids) {
  const at::Tensor mask = token_ids != 0;
  return {hidden.to(at::kFloat) * mask.unsqueeze(-1).to(at::kFloat), mask};
}

class BuiltinTextEncoder final : public TextEncoder {
 public:
  explicit BuiltinTextEncoder(const TextCacheParams& params) : module_(params) {
    init_frozen(*module_, {static_cast<uint64_t>(params.seed), params.weights}, EncoderPlacement{});
  }
  TextContext encode(const std::vector<std::string>& prompts) override {
    torch::NoGradGuard no_grad;
    const at::Tensor ids = text_byte_tokens(prompts);
    return masked(module_->forward(ids), ids);
  }

 private:
  ByteTextEncoder module_;
};

class ExportedTextEncoder final : public TextEncoder {
 public:
  ExportedTextEncoder(const std::string& encoder, std::string path, int64_t text_dim)
      : path_(std::move(path)),
        text_dim_(text_dim),
        module_(load_exported_module(encoder, path_, "TextEmbed", EncoderPlacement{})) {
    encode({"probe"});
  }
  TextContext encode(const std::vector<std::string>& prompts) override {
    torch::NoGradGuard no_grad;
    const at::Tensor ids = text_byte_tokens(prompts);
    const at::Tensor hidden = module_->call({ids});
    const std::vector<int64_t> expected = {ids.size(0), kTextTokens, text_dim_};
    if (hidden.sizes() != at::IntArrayRef(expected)) {
      throw Error(std::string(module_->kind()) + " text encoder " + path_ + ": for token_ids " +
                  shape_string(ids.sizes()) + " expected [N, 128, text_dim] = " +
                  shape_string(expected) + ", got " + shape_string(hidden.sizes()));
    }
    return masked(hidden, ids);
  }

 private:
  std::string path_;
  int64_t text_dim_;
  std::unique_ptr<ExportedModule> module_;
};

}  // namespace

std::string encoder_id(const TextCacheParams& params) {
  if (params.encoder != "builtin") {
    if (!fs::is_regular_file(params.path)) {
      throw Error(std::string("TextEmbed: ") +
                  (params.encoder == "aoti" ? "AOTInductor package " : "TorchScript file ") +
                  params.path + " does not exist");
    }
    return params.encoder + ":sha256=" + sha256_file_hex(params.path);
  }
  std::string id =
      "builtin:width=" + std::to_string(params.width) + ",layers=" + std::to_string(params.layers) +
      ",heads=" + std::to_string(params.heads) + ",seed=" + std::to_string(params.seed);
  if (params.ffn != 0 || params.activation != "silu") {
    id += ",ffn=" + std::to_string(params.ffn) + ",activation=" + params.activation;
  }
  if (!params.weights.empty()) id += ",weights_sha256=" + sha256_file_hex(params.weights);
  return id;
}

at::Tensor text_byte_tokens(const std::vector<std::string>& prompts) {
  at::Tensor ids = torch::zeros({static_cast<int64_t>(prompts.size()), kTextTokens}, at::kLong);
  for (size_t n = 0; n < prompts.size(); ++n) {
    int64_t* row = ids[static_cast<int64_t>(n)].data_ptr<int64_t>();
    const size_t bytes = std::min(prompts[n].size(), static_cast<size_t>(kTextTokens - 1));
    for (size_t i = 0; i < bytes; ++i) {
      row[i] = static_cast<unsigned char>(prompts[n][i]) + kByteOffset;
    }
    row[bytes] = kEndByteToken;
  }
  return ids;
}

std::unique_ptr<TextEncoder> make_text_encoder(const TextCacheParams& params) {
  if (params.encoder != "builtin") {
    return std::make_unique<ExportedTextEncoder>(params.encoder, params.path, params.text_dim);
  }
  if (params.width % params.heads != 0 || (params.width / params.heads) % 2 != 0) {
    throw Error("TextEmbed: param width (" + std::to_string(params.width) +
                ") divided by param heads (" + std::to_string(params.heads) +
                ") must be an even whole number (the RoPE head dimension)");
  }
  return std::make_unique<BuiltinTextEncoder>(params);
}

TextCacheReader::TextCacheReader(const TextCacheParams& params)
    : path_(params.cache), text_dim_(params.text_dim) {
  if (!fs::is_regular_file(path_)) {
    throw Error("TextEmbed: text cache " + path_ + " does not exist: " + rebuild_hint());
  }
  file_ = open_for_reading(path_);
  const int64_t stored_dim = required_int_attribute(file_, "text_dim", path_);
  if (stored_dim != text_dim_) {
    throw Error("TextEmbed: text cache " + path_ + " holds text_dim " + std::to_string(stored_dim) +
                " but param text_dim is " + std::to_string(text_dim_) + ": " + rebuild_hint());
  }
  const std::string stored_encoder = required_string_attribute(file_, "encoder", path_);
  const std::string expected_encoder = encoder_id(params);
  if (stored_encoder != expected_encoder) {
    throw Error("TextEmbed: text cache " + path_ + " was built by encoder " + stored_encoder +
                " but the TextEmbed params name " + expected_encoder + ": " + rebuild_hint());
  }
}

TextCacheReader::~TextCacheReader() {
  if (file_ >= 0) H5Fclose(file_);
}

std::optional<TextContext> TextCacheReader::find(const std::string& prompt) const {
  const std::string key = sha256_hex(prompt);
  if (H5Lexists(file_, key.c_str(), H5P_DEFAULT) <= 0) return std::nullopt;
  H5Handle group(h5_check(H5Gopen2(file_, key.c_str(), H5P_DEFAULT), "open entry " + key, path_),
                 H5Gclose);
  TextContext entry;
  entry.context = torch::empty({kTextTokens, text_dim_}, at::kFloat);
  const at::Tensor mask = torch::empty({kTextTokens}, at::kByte);
  const hsize_t tokens = kTextTokens, width = static_cast<hsize_t>(text_dim_);
  read_array(group.get(), "context", H5T_NATIVE_FLOAT, {tokens, width},
             entry.context.data_ptr<float>(), path_ + " (entry " + key + ")");
  read_array(group.get(), "mask", H5T_NATIVE_UINT8, {tokens}, mask.data_ptr<uint8_t>(),
             path_ + " (entry " + key + ")");
  entry.mask = mask.to(at::kBool);
  return entry;
}

TextCacheBuildResult build_text_cache(const TextCacheParams& params,
                                      const std::vector<std::string>& prompts,
                                      const std::function<void(const std::string&)>& progress) {
  const std::string& path = params.cache;
  const std::string id = encoder_id(params);
  TextCacheBuildResult result;

  std::vector<std::string> distinct;
  std::set<std::string> seen;
  for (const auto& prompt : prompts) {
    if (seen.insert(prompt).second) distinct.push_back(prompt);
  }
  result.prompts = static_cast<int64_t>(distinct.size());

  // Entries of an existing file from the same encoder are copied, not encoded again.
  std::optional<H5Handle> old_file;
  std::set<std::string> kept;
  if (fs::is_regular_file(path)) {
    old_file.emplace(open_for_reading(path), H5Fclose);
    if (hdf5::read_int_attribute(old_file->get(), "text_dim", path) == params.text_dim &&
        hdf5::read_string_attribute(old_file->get(), "encoder", path) == id) {
      for (auto& name : list_entries(old_file->get(), path)) kept.insert(std::move(name));
    } else {
      progress(path + " was built by another encoder or text_dim: rebuilding every entry");
    }
  }
  std::vector<std::string> to_encode;
  for (const auto& prompt : distinct) {
    if (!kept.count(sha256_hex(prompt))) to_encode.push_back(prompt);
  }

  AtomicFile out(path);  // HDF5 writes its temporary; removed unless published
  const std::string& tmp = out.temporary();
  {
    std::unique_ptr<TextEncoder> encoder;
    if (!to_encode.empty()) encoder = make_text_encoder(params);
    hdf5::silence_errors();
    H5Handle file(h5_check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                           "create the file", tmp),
                  H5Fclose);
    hdf5::write_int_attribute(file.get(), "text_dim", params.text_dim, tmp);
    hdf5::write_string_attribute(file.get(), "encoder", id, tmp);
    for (const auto& name : kept) {
      h5_check(H5Ocopy(old_file->get(), name.c_str(), file.get(), name.c_str(), H5P_DEFAULT,
                       H5P_DEFAULT),
               "copy entry " + name, tmp);
      ++result.kept;
    }
    for (size_t start = 0; start < to_encode.size(); start += kEncodeChunk) {
      const size_t end = std::min(to_encode.size(), start + kEncodeChunk);
      const std::vector<std::string> chunk(to_encode.begin() + start, to_encode.begin() + end);
      const TextContext encoded = encoder->encode(chunk);
      const at::Tensor masks = encoded.mask.to(at::kByte).contiguous();
      const at::Tensor contexts = encoded.context.contiguous();
      for (size_t i = 0; i < chunk.size(); ++i) {
        const std::string key = sha256_hex(chunk[i]);
        H5Handle group(
            h5_check(H5Gcreate2(file.get(), key.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "create entry " + key, tmp),
            H5Gclose);
        hdf5::write_string_attribute(group.get(), "prompt", chunk[i], tmp);
        const auto row = static_cast<int64_t>(i);
        const hsize_t tokens = kTextTokens, width = static_cast<hsize_t>(params.text_dim);
        write_array(group.get(), "context", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {tokens, width},
                    contexts[row].data_ptr<float>(), tmp);
        write_array(group.get(), "mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, {tokens},
                    masks[row].data_ptr<uint8_t>(), tmp);
        ++result.encoded;
      }
      progress("encoded " + std::to_string(end) + "/" + std::to_string(to_encode.size()) +
               " prompts");
    }
  }
  old_file.reset();
  out.publish();
  return result;
}

}  // namespace wam::models
