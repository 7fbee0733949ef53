// The runner's in-flight accounting, alone: no graph, no threads.
#include "credit_ledger.h"

#include <gtest/gtest.h>

namespace wam {
namespace {

const char* kSetting = "p.json:/settings/max_in_flight";

TEST(CreditLedger, ASourceItemHoldsItsOwnCreditUntilItLeaves) {
  CreditLedger ledger(4, kSetting, 1);
  Credits item;  // as the source emits it
  EXPECT_TRUE(item.own);
  EXPECT_TRUE(item.carried.empty());
  EXPECT_EQ(ledger.release(7, item), 1u);
}

TEST(CreditLedger, WithSeveralTerminalsTheCreditComesBackWhenTheLastFinishes) {
  CreditLedger ledger(4, kSetting, 3);
  Credits item;
  EXPECT_EQ(ledger.release(0, item), 0u);
  EXPECT_EQ(ledger.release(1, item), 0u);  // another item does not complete item 0
  EXPECT_EQ(ledger.release(0, item), 0u);
  EXPECT_EQ(ledger.release(0, item), 1u);
  EXPECT_EQ(ledger.release(1, item), 0u);
  EXPECT_EQ(ledger.release(1, item), 1u);
}

TEST(CreditLedger, AbsorbedItemsKeepTheirCreditsUntilTheBatchLeaves) {
  CreditLedger ledger(4, kSetting, 1);
  const size_t batch_node = 2;
  Credits first, second;
  ledger.absorb(batch_node, 0, first);
  ledger.absorb(batch_node, 1, second);
  // The absorbed items' packets leave nothing to return.
  EXPECT_FALSE(first.own);
  EXPECT_TRUE(first.carried.empty());
  EXPECT_EQ(ledger.release(0, first), 0u);

  // Item 2 completes the batch: it carries its own credit and the two absorbed ones.
  Credits batch;
  ledger.hand_to_batch(batch_node, batch);
  EXPECT_TRUE(batch.own);
  EXPECT_EQ(batch.carried, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(ledger.release(2, batch), 3u);

  // The node holds nothing once the batch took its credits.
  Credits next_batch;
  ledger.hand_to_batch(batch_node, next_batch);
  EXPECT_TRUE(next_batch.carried.empty());
}

TEST(CreditLedger, ABatchAbsorbedDownstreamPassesOnEveryCreditItCarries) {
  CreditLedger ledger(8, kSetting, 1);
  Credits batch;
  batch.carried = {0, 1};
  ledger.absorb(5, 2, batch);  // a second batching node absorbs the batch of items 0..2
  Credits outer;
  outer.own = false;  // emitted at end of input: no item of its own
  ledger.hand_to_batch(5, outer);
  EXPECT_EQ(outer.carried, (std::vector<uint64_t>{2, 0, 1}));
  EXPECT_EQ(ledger.release(9, outer), 3u);
}

TEST(CreditLedger, MergeKeepsEachCreditOfTheBranchesOnce) {
  Credits left, right;
  left.carried = {3, 1};
  right.own = false;
  right.carried = {1, 2};
  Credits merged = CreditLedger::merge({&left, &right});
  EXPECT_FALSE(merged.own);  // a branch's batch took the item's credit
  EXPECT_EQ(merged.carried, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(CreditLedger::merge({&left, &left}).own);
}

TEST(CreditLedger, AStallNamesTheNodeHoldingTheMostCreditsAndTheSetting) {
  CreditLedger ledger(3, kSetting, 1);
  Credits a, b, c;
  ledger.absorb(1, 0, a);
  ledger.absorb(2, 1, b);
  ledger.absorb(2, 2, c);  // the bound: all 3 credits are held, none can enter
  CreditLedger::Stall stall = ledger.diagnose_stall({"source", "small", "batch"});
  EXPECT_EQ(stall.holder, std::optional<size_t>(2));
  EXPECT_EQ(stall.message,
            "the graph stalled: all 3 source items allowed by p.json:/settings/max_in_flight are "
            "held by batch waiting to complete a batch; raise it to at least the batch size (a "
            "few batches more keeps every stage busy)");
}

TEST(CreditLedger, AStallWithNoBatchHoldingCreditsNamesNoHolder) {
  CreditLedger ledger(2, kSetting, 1);
  CreditLedger::Stall stall = ledger.diagnose_stall({"source", "step"});
  EXPECT_FALSE(stall.holder.has_value());
  EXPECT_EQ(stall.message,
            "the graph stalled with all 2 source items allowed by "
            "p.json:/settings/max_in_flight inside it");
}

}  // namespace
}  // namespace wam
