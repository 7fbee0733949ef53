#include "credit_ledger.h"

#include <algorithm>

namespace wam {

Credits CreditLedger::merge(const std::vector<const Credits*>& parts) {
  Credits merged;
  for (const Credits* part : parts) {
    merged.own = merged.own && part->own;
    merged.carried.insert(merged.carried.end(), part->carried.begin(), part->carried.end());
  }
  std::sort(merged.carried.begin(), merged.carried.end());
  merged.carried.erase(std::unique(merged.carried.begin(), merged.carried.end()),
                       merged.carried.end());
  return merged;
}

void CreditLedger::absorb(size_t node, uint64_t seq, Credits& credits) {
  std::lock_guard<std::mutex> lock(held_mutex_);
  std::vector<uint64_t>& held = held_[node];
  if (credits.own) held.push_back(seq);
  held.insert(held.end(), credits.carried.begin(), credits.carried.end());
  credits.own = false;
  credits.carried.clear();
}

void CreditLedger::hand_to_batch(size_t node, Credits& batch) {
  std::lock_guard<std::mutex> lock(held_mutex_);
  std::vector<uint64_t>& held = held_[node];
  batch.carried.insert(batch.carried.end(), held.begin(), held.end());
  held.clear();
}

size_t CreditLedger::release(uint64_t seq, const Credits& credits) {
  size_t returned = credits.own ? release(seq) : 0;
  for (uint64_t carried : credits.carried) returned += release(carried);
  return returned;
}

size_t CreditLedger::release(uint64_t seq) {
  if (terminal_count_ > 1) {
    std::lock_guard<std::mutex> lock(release_mutex_);
    if (++terminals_done_[seq] < terminal_count_) return 0;
    terminals_done_.erase(seq);
  }
  return 1;
}

CreditLedger::Stall CreditLedger::diagnose_stall(const std::vector<std::string>& node_ids) const {
  size_t holder = 0, most = 0;
  {
    std::lock_guard<std::mutex> lock(held_mutex_);
    for (const auto& [node, held] : held_) {
      if (held.size() > most) holder = node, most = held.size();
    }
  }
  const std::string limit = std::to_string(max_in_flight_);
  if (most == 0) {
    return {std::nullopt, "the graph stalled with all " + limit + " source items allowed by " +
                              setting_ + " inside it"};
  }
  return {holder, "the graph stalled: all " + limit + " source items allowed by " + setting_ +
                      " are held by " + node_ids[holder] +
                      " waiting to complete a batch; raise it to at least the batch size (a few "
                      "batches more keeps every stage busy)"};
}

}  // namespace wam
