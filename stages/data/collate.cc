// Collate: stacks samples into batches, in arrival order (order-sensitive, serial).
// Tensor fields gain a leading batch dimension; Int, Double and Bool fields become 1-D int64,
// float64 and bool tensors; String and Json fields become Json arrays. Every sample of a batch must
// have the same fields, types and shapes as the batch's first sample.
//
// Samples are copied into batch buffers as they arrive, so their own tensors are released at once.
// A tensor field's buffer is on the device of the first sample's tensor: fields Augment made on the
// GPU are batched there, on the current stream, without a round trip through host memory. Where a
// batch mixes host and GPU samples (VideoDecode's cpu_first decoder spills samples to NVDEC, and
// Augment augments those on the GPU), the field is batched on the GPU: the rows before the first
// GPU sample move there, and later host samples are copied up.
// Each field keeps a small pool of buffers that are reused only when nothing downstream still
// references them: an emitted batch is never written again.
//
// Reads:  every field (generic).  Writes: the same fields batched, sample_keys (Json array of the
//         member samples' keys). A batch's key is "batch:<n>".
// Example: {"id": "collate", "type": "Collate", "inputs": ["augment"],
//           "params": {"batch_size": 16, "drop_last": true}}
#include <unistd.h>

#include <cstdint>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/torch_threads.h"
#include "wam/registry.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

struct CollateParams {
  int64_t batch_size = 0;
  bool drop_last = false;
  int64_t buffers = 4;

  template <class V>
  void visit(V& v) {
    v("batch_size", batch_size, "Samples per batch (0: the pipeline's settings.batch_size).",
      Min{0});
    v("drop_last", drop_last, "Drop the last batch when it is smaller than batch_size.");
    v("buffers", buffers,
      "Batch buffers kept for reuse per field; when all are still held downstream a new one is "
      "allocated (counted as buffer_allocations).",
      Min{1});
  }
};

// One batched field. Tensor, Int, Double and Bool fields fill `buffer`; String and Json fields
// fill `values`.
struct Column {
  std::string name;
  FieldType type;
  std::vector<int64_t> sample_sizes;  // Tensor fields: the first sample's sizes, dtype, device
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  std::string device_key;  // the sample whose tensor put the buffer on `device`
  at::Tensor buffer;
  nlohmann::json values = nlohmann::json::array();
};

std::string quoted(const std::string& text) { return "\"" + text + "\""; }

// As describe_tensor: "float32[3, 9, 384, 256]".
std::string describe_shape(at::ScalarType dtype, at::IntArrayRef sizes) {
  std::ostringstream out;
  out << c10::toString(dtype) << sizes;
  return out.str();
}

class CollateStage final : public Stage {
 public:
  static constexpr std::string_view kType = "Collate";
  static constexpr std::string_view kSummary =
      "Stacks samples into batches (Tensor fields gain a batch dimension) in reusable buffers.";
  using Params = CollateParams;

  explicit CollateStage(Params params) : params_(params) {}

  void declare(Contract& contract) const override {
    contract.writes("sample_keys", FieldType::kJson);
    contract.order_sensitive();
    contract.batches();
    contract.concurrency(Concurrency::serial());
  }

  void open(Context& context) override {
    batch_size_ = params_.batch_size > 0 ? params_.batch_size : context.settings().batch_size;
    batch_size_source_ = params_.batch_size > 0 ? "batch_size" : "settings.batch_size";
    buffer_allocations_ = &context.counter("buffer_allocations");
    dropped_samples_ = &context.counter("dropped_samples");
  }

  void process(Sample sample, Emitter& out) override {
    use_one_torch_thread();
    if (members_.empty()) {
      start_batch(sample);
    } else {
      check_matches_first(sample);
    }
    append(sample);
    if (static_cast<int64_t>(members_.size()) == batch_size_) flush(out);
  }

  void close(Emitter& out) override {
    if (members_.empty()) return;
    if (params_.drop_last) {
      dropped_samples_->add(static_cast<int64_t>(members_.size()));
      reset();
      return;
    }
    flush(out);
  }

 private:
  void start_batch(const Sample& first) {
    for (const auto& [name, value] : first.fields()) {
      Column column;
      column.name = name;
      column.type = type_of(value);
      switch (column.type) {
        case FieldType::kTensor: {
          const at::Tensor& tensor = first.tensor(name);
          column.sample_sizes = tensor.sizes().vec();
          column.dtype = tensor.scalar_type();
          column.device = tensor.device();
          column.device_key = first.key();
          std::vector<int64_t> sizes = {batch_size_};
          sizes.insert(sizes.end(), tensor.sizes().begin(), tensor.sizes().end());
          column.buffer = acquire(name, sizes, tensor.scalar_type(), tensor.device());
          break;
        }
        case FieldType::kInt: column.buffer = acquire(name, {batch_size_}, at::kLong); break;
        case FieldType::kDouble: column.buffer = acquire(name, {batch_size_}, at::kDouble); break;
        case FieldType::kBool: column.buffer = acquire(name, {batch_size_}, at::kBool); break;
        case FieldType::kString:
        case FieldType::kJson: break;
      }
      columns_.push_back(std::move(column));
    }
  }

  // A free pooled buffer of this size and dtype, else a new one. A buffer is free when this pool
  // holds the only reference to both its tensor and its storage (views and emitted copies count).
  at::Tensor acquire(const std::string& name, const std::vector<int64_t>& sizes,
                     at::ScalarType dtype, at::Device device = at::kCPU) {
    auto& pool = pools_[name];
    auto is_free = [](const at::Tensor& t) {
      return t.use_count() == 1 && t.storage().use_count() == 1;
    };
    for (const at::Tensor& buffer : pool) {
      if (buffer.sizes() == at::IntArrayRef(sizes) && buffer.scalar_type() == dtype &&
          buffer.device() == device && is_free(buffer)) {
        return buffer;
      }
    }
    at::Tensor fresh = allocate(name, sizes, dtype, device);
    buffer_allocations_->add();
    if (static_cast<int64_t>(pool.size()) < params_.buffers) {
      pool.push_back(fresh);
    } else {
      // Replace a free buffer of another shape; when every buffer is held, this one is not kept.
      for (at::Tensor& buffer : pool) {
        if (is_free(buffer)) {
          buffer = fresh;
          break;
        }
      }
    }
    return fresh;
  }

  // A batch buffer, or an error naming batch_size and the memory it needs instead of LibTorch's
  // allocator failure (with its backtrace), or of a buffer larger than the machine's memory.
  at::Tensor allocate(const std::string& name, const std::vector<int64_t>& sizes,
                      at::ScalarType dtype, at::Device device) {
    uint64_t bytes = c10::elementSize(dtype);
    bool overflow = false;
    for (int64_t size : sizes) {
      overflow = overflow || __builtin_mul_overflow(bytes, static_cast<uint64_t>(size), &bytes);
    }
    const uint64_t memory = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                            static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    auto too_large = [&](const std::string& why) {
      return Error("Collate: field " + quoted(name) + " needs a batch buffer of " +
                   describe_shape(dtype, sizes) + " (" +
                   (overflow ? std::string("more than 16 EiB") : human_bytes(bytes)) + ") at " +
                   batch_size_source_ + "=" + std::to_string(batch_size_) + ", " + why +
                   "; lower batch_size (settings.max_in_flight, at least the batch size, bounds "
                   "how many samples are held besides)");
    };
    if (overflow) throw too_large("more than any machine's memory");
    if (device.is_cpu() && memory > 0 && bytes > memory) {
      throw too_large("more than this machine's " + human_bytes(memory) + " of memory");
    }
    try {
      return at::empty(sizes, at::TensorOptions().dtype(dtype).device(device));
    } catch (const c10::Error& e) {
      throw too_large("which could not be allocated (" + std::string(e.what_without_backtrace()) +
                      ")");
    } catch (const std::bad_alloc&) {
      throw too_large("which could not be allocated");
    }
  }

  static std::string human_bytes(uint64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double value = static_cast<double>(bytes);
    size_t unit = 0;
    while (value >= 1024 && unit + 1 < std::size(units)) {
      value /= 1024;
      ++unit;
    }
    std::ostringstream out;
    out.precision(unit == 0 ? 0 : 1);
    out << std::fixed << value << " " << units[unit];
    return out.str();
  }

  static bool host_and_gpu(at::Device a, at::Device b) {
    return (a.is_cpu() && b.is_cuda()) || (a.is_cuda() && b.is_cpu());
  }

  // A host column's buffer, its first `rows` rows filled, moved to the device of `sample`'s tensor.
  void move_to(Column& column, const Sample& sample, int64_t rows) {
    const at::Device device = sample.tensor(column.name).device();
    at::Tensor moved = acquire(column.name, column.buffer.sizes().vec(), column.dtype, device);
    moved.narrow(0, 0, rows).copy_(column.buffer.narrow(0, 0, rows));
    column.buffer = moved;
    column.device = device;
    column.device_key = sample.key();
  }

  void check_matches_first(const Sample& sample) const {
    const std::string& first_key = members_.front();
    const std::string where = " (batch " + std::to_string(batch_index_) + ")";
    for (const auto& [name, value] : sample.fields()) {
      bool known = false;
      for (const Column& column : columns_) known = known || column.name == name;
      if (!known) {
        throw Error("Collate: sample " + quoted(sample.key()) + " has field " + quoted(name) +
                    " but sample " + quoted(first_key) + where +
                    " does not; samples of a batch must have the same fields");
      }
    }
    for (const Column& column : columns_) {
      if (!sample.has(column.name)) {
        throw Error("Collate: sample " + quoted(sample.key()) + " lacks field " +
                    quoted(column.name) + " that sample " + quoted(first_key) + where +
                    " has; samples of a batch must have the same fields");
      }
      const FieldType type = sample.type(column.name);
      if (type != column.type) {
        throw Error("Collate: field " + quoted(column.name) + " is " +
                    std::string(field_type_name(type)) + " in sample " + quoted(sample.key()) +
                    " but " + std::string(field_type_name(column.type)) + " in sample " +
                    quoted(first_key) + where);
      }
      if (type != FieldType::kTensor) continue;
      const at::Tensor& tensor = sample.tensor(column.name);
      if (tensor.device() != column.device && !host_and_gpu(tensor.device(), column.device)) {
        throw Error("Collate: field " + quoted(column.name) + " is on " + tensor.device().str() +
                    " in sample " + quoted(sample.key()) + " but on " + column.device.str() +
                    " in sample " + quoted(column.device_key) + where +
                    "; samples of a batch must have their tensors in host memory or on one GPU");
      }
      if (tensor.sizes() != at::IntArrayRef(column.sample_sizes) ||
          tensor.scalar_type() != column.dtype) {
        throw Error("Collate: field " + quoted(column.name) + " is " + describe_tensor(tensor) +
                    " in sample " + quoted(sample.key()) + " but " +
                    describe_shape(column.dtype, column.sample_sizes) + " in sample " +
                    quoted(first_key) + where + "; samples of a batch must have equal shapes");
      }
    }
  }

  void append(const Sample& sample) {
    const int64_t row = static_cast<int64_t>(members_.size());
    for (Column& column : columns_) {
      switch (column.type) {
        case FieldType::kTensor: {
          const at::Tensor& tensor = sample.tensor(column.name);
          if (column.device.is_cpu() && !tensor.is_cpu()) move_to(column, sample, row);
          column.buffer.select(0, row).copy_(tensor);
          break;
        }
        case FieldType::kInt:
          column.buffer.data_ptr<int64_t>()[row] = sample.get_int(column.name);
          break;
        case FieldType::kDouble:
          column.buffer.data_ptr<double>()[row] = sample.get_double(column.name);
          break;
        case FieldType::kBool:
          column.buffer.data_ptr<bool>()[row] = sample.get_bool(column.name);
          break;
        case FieldType::kString: column.values.push_back(sample.get_string(column.name)); break;
        case FieldType::kJson: column.values.push_back(sample.get_json(column.name)); break;
      }
    }
    members_.push_back(sample.key());
  }

  void flush(Emitter& out) {
    const int64_t rows = static_cast<int64_t>(members_.size());
    Sample batch("batch:" + std::to_string(batch_index_));
    batch.set_seq(static_cast<uint64_t>(batch_index_));
    for (Column& column : columns_) {
      if (column.type == FieldType::kString || column.type == FieldType::kJson) {
        batch.set(column.name, std::move(column.values));
      } else {
        // A partial batch is a view: it shares the buffer's storage, which keeps it held.
        batch.set_tensor(column.name,
                         rows == batch_size_ ? column.buffer : column.buffer.narrow(0, 0, rows));
      }
    }
    batch.set("sample_keys", nlohmann::json(members_));
    ++batch_index_;
    reset();
    out.emit(std::move(batch));
  }

  void reset() {
    columns_.clear();
    members_.clear();
  }

  Params params_;
  int64_t batch_size_ = 0;
  std::string batch_size_source_;
  Counter* buffer_allocations_ = nullptr;
  Counter* dropped_samples_ = nullptr;
  std::map<std::string, std::vector<at::Tensor>> pools_;
  std::vector<Column> columns_;
  std::vector<std::string> members_;  // keys of the samples in the current batch
  int64_t batch_index_ = 0;
};

WAM_REGISTER_STAGE(CollateStage);

}  // namespace
}  // namespace wam::stages
