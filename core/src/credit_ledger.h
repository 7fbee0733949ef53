// In-flight accounting for the runner, kept apart from TBB so it can be tested alone.
//
// At most max_in_flight source items are inside the graph. A source item takes a credit when it
// enters and gives it back once every terminal node has finished it. A batching node that absorbs
// an item keeps the item's credit until it emits a batch; the batch then carries the credits of
// every item in it, and they come back when the batch leaves the graph. The runner's limiter
// holds the count; this ledger says when a credit comes back.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace wam {

// The credits one packet (the samples of one source item, or a batch) carries.
struct Credits {
  bool own = true;                // its own item's; false once a batching node absorbed the item
  std::vector<uint64_t> carried;  // of the items batched into its samples
};

class CreditLedger {
 public:
  // `setting` locates max_in_flight in the pipeline file, for the stall message.
  CreditLedger(int64_t max_in_flight, std::string setting, size_t terminal_count)
      : max_in_flight_(max_in_flight),
        setting_(std::move(setting)),
        terminal_count_(terminal_count) {}

  // A join's inputs are branches of one fan-out and carry the same credits: each is kept once.
  static Credits merge(const std::vector<const Credits*>& parts);

  // The batching node `node` absorbed item `seq` without emitting: it takes the packet's credits.
  void absorb(size_t node, uint64_t seq, Credits& credits);
  // The batching node `node` emitted a batch: the batch carries every credit the node held.
  void hand_to_batch(size_t node, Credits& batch);

  // A terminal finished a packet of item `seq`; returns how many credits come back to the limiter:
  // those of the items every terminal has now finished.
  size_t release(uint64_t seq, const Credits& credits);

  // The graph went idle with its source neither exhausted nor stopped. Names the batching node
  // holding the most credits (none when no node holds any) and explains the stall.
  struct Stall {
    std::optional<size_t> holder;
    std::string message;
  };
  Stall diagnose_stall(const std::vector<std::string>& node_ids) const;

 private:
  size_t release(uint64_t seq);

  const int64_t max_in_flight_;
  const std::string setting_;
  const size_t terminal_count_;
  std::mutex release_mutex_;
  std::map<uint64_t, size_t> terminals_done_;  // by item, while some terminal has not finished it
  mutable std::mutex held_mutex_;
  std::map<size_t, std::vector<uint64_t>> held_;  // by batching node
};

}  // namespace wam
