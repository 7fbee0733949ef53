#include "commands/bench_table.h"

#include <gtest/gtest.h>

namespace wam::cli {
namespace {

TEST(BenchTable, PipelinesSideBySideAgainstTheFirst) {
  const std::vector<BenchRow> rows = {{"robotwin_baseline", 10.0, 0.4125, int64_t(3) << 30},
                                      {"robotwin_online", 25.5, 0.95, int64_t(5) << 29},
                                      {"robotwin_compile", 40.0, std::nullopt, -1}};
  EXPECT_EQ(bench_table(rows),
            "pipeline           samples/s  vs first  efficiency  peak memory\n"
            "robotwin_baseline      10.00     1.00x       0.412     3.00 GiB\n"
            "robotwin_online        25.50     2.55x       0.950     2.50 GiB\n"
            "robotwin_compile       40.00     4.00x           -            -\n");
  const nlohmann::json json = bench_table_json(rows);
  ASSERT_EQ(json.size(), 3u);
  EXPECT_EQ(json[1]["vs_first"], 2.55);
  EXPECT_EQ(json[1]["pipeline_efficiency"], 0.95);
  EXPECT_TRUE(json[2]["pipeline_efficiency"].is_null());
  EXPECT_EQ(json[2]["peak_bytes"], -1);
}

}  // namespace
}  // namespace wam::cli
