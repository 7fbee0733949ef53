#include "common/lru_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace wam {
namespace {

TEST(LruCacheTest, EvictsTheLeastRecentlyUsedEntry) {
  LruCache<std::string, int> cache(2);
  cache.insert("a", 1);
  cache.insert("b", 2);
  ASSERT_NE(cache.find("a"), nullptr);  // "a" is now the most recently used
  cache.insert("c", 3);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.find("b"), nullptr);
  ASSERT_NE(cache.find("a"), nullptr);
  EXPECT_EQ(*cache.find("a"), 1);
  ASSERT_NE(cache.find("c"), nullptr);
  EXPECT_EQ(*cache.find("c"), 3);
}

TEST(LruCacheTest, InsertingAnExistingKeyReplacesItsValue) {
  LruCache<std::string, int> cache(2);
  cache.insert("a", 1);
  cache.insert("b", 2);
  EXPECT_EQ(cache.insert("a", 10), 10);
  EXPECT_EQ(cache.size(), 2u);
  cache.insert("c", 3);  // evicts "b": the replaced "a" counts as just used
  EXPECT_EQ(cache.find("b"), nullptr);
  ASSERT_NE(cache.find("a"), nullptr);
  EXPECT_EQ(*cache.find("a"), 10);
}

}  // namespace
}  // namespace wam
