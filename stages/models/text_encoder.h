// The T5-style text context. The reference encodes every instruction once with umT5-xxl (4096 wide,
// not loaded during training) and reads the result back; here the same: an HDF5 text cache keyed by
// the SHA-256 of the prompt, filled by `wam-pipeline text-cache build` with a built-in stand-in
// encoder (seeded random weights) or a user's TorchScript export, and read by the TextEmbed stage.
//
// Cache file layout (HDF5):
//   attributes  text_dim (int64), encoder (string: what produced the entries, see encoder_id())
//   /<sha256 hex of the prompt>/   attribute prompt (string)
//       context  float32 [128, text_dim]  rows past the prompt's tokens are zero
//       mask     uint8 [128]              1 for the prompt's tokens
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/encoder_params.h"
#include "wam/params.h"

namespace wam::models {

inline constexpr int64_t kTextTokens = 128;

// Where the text cache is and which encoder fills it: the TextEmbed stage's params, also read from
// the pipeline's TextEmbed node by `wam-pipeline text-cache build`.
struct TextCacheParams : FrozenEncoderParams {
  std::string cache;
  int64_t text_dim = 4096;
  int64_t width = 512;
  int64_t layers = 2;
  int64_t heads = 8;
  int64_t ffn = 0;
  std::string activation = "silu";
  int64_t memory_entries = 64;

  template <class V>
  void visit(V& v) {
    v("cache", cache,
      "HDF5 text cache, e.g. ${WAM_CACHE_ROOT}/text_embed/robotwin.h5 (filled by `wam-pipeline "
      "text-cache build PIPELINE`).",
      NonEmpty{});
    v("text_dim", text_dim, "Context width (umT5-xxl: 4096).", Min{1});
    visit_encoder_params(
        v,
        "Encoder that fills the cache. builtin: a seeded stand-in (byte tokens, transformer, "
        "projection to text_dim); torchscript: the file at `path`, forward(token_ids int64 "
        "[N,128]: UTF-8 byte + 2, 1 = end, 0 = pad) -> [N,128,text_dim].");
    v("width", width, "Built-in stand-in: transformer width.", Min{2});
    v("layers", layers, "Built-in stand-in: transformer layers.", Min{1});
    v("heads", heads, "Built-in stand-in: attention heads (width / heads must be even).", Min{1});
    v("ffn", ffn, "Built-in stand-in: gated MLP width (0: 2 x width; umT5-xxl: 10240).", Min{0});
    v("activation", activation,
      "Built-in stand-in: the gated MLP's activation (umT5-xxl: gelu, tanh approximation).",
      OneOf{"silu", "gelu"});
    v("memory_entries", memory_entries,
      "Embeddings kept in memory after reading them from the cache (LRU).", Min{1});
  }

  void check(ParamChecker& c) const { check_encoder(c); }
};

// What produced a cache's entries: "builtin:width=512,layers=2,heads=8,seed=0" (then
// ",ffn=10240,activation=gelu" when either differs from its default, so that caches built before
// those params existed keep their id) or
// "torchscript:sha256=<hex of the file>" ("aoti:sha256=..." for a package). Entries from another
// encoder are not reused.
std::string encoder_id(const TextCacheParams& params);

// [N, 128] int64 byte tokens: each UTF-8 byte + 2, then 1 (end), then 0 (padding); truncated to
// 128 tokens with the end token kept.
at::Tensor text_byte_tokens(const std::vector<std::string>& prompts);

struct TextContext {
  at::Tensor context;  // float32 [N, 128, text_dim], rows past the mask zero
  at::Tensor mask;     // bool [N, 128]
};

class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  virtual TextContext encode(const std::vector<std::string>& prompts) = 0;
};

// The built-in stand-in or the TorchScript file (checked with a probe; a wrong output shape is an
// error naming the file, the expected and the returned shape). Runs on the CPU in float32.
std::unique_ptr<TextEncoder> make_text_encoder(const TextCacheParams& params);

// Reads entries of a text cache; the file stays open while the reader lives.
class TextCacheReader {
 public:
  // Throws wam::Error when the file is missing, unreadable, or was built with another text_dim or
  // encoder than `params` names, saying to run `wam-pipeline text-cache build PIPELINE`.
  explicit TextCacheReader(const TextCacheParams& params);
  ~TextCacheReader();
  TextCacheReader(const TextCacheReader&) = delete;
  TextCacheReader& operator=(const TextCacheReader&) = delete;

  // context float32 [128, text_dim] and mask bool [128]; nothing when the prompt has no entry.
  std::optional<TextContext> find(const std::string& prompt) const;

 private:
  std::string path_;
  int64_t text_dim_;
  int64_t file_ = -1;  // hid_t
};

struct TextCacheBuildResult {
  int64_t prompts = 0;  // distinct prompts asked for
  int64_t encoded = 0;  // newly encoded
  int64_t kept = 0;     // entries already in the file from the same encoder, copied over
};

// Writes params.cache (atomically: <path>.tmp, then rename) so that it holds every prompt of
// `prompts`, plus the entries the existing file already had from the same encoder and text_dim.
// `progress` gets one line per encoded chunk of prompts.
TextCacheBuildResult build_text_cache(const TextCacheParams& params,
                                      const std::vector<std::string>& prompts,
                                      const std::function<void(const std::string&)>& progress);

}  // namespace wam::models
