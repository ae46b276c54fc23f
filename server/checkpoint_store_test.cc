// One conformance suite for every CheckpointStore backend.
#include "server/checkpoint_store.h"

#include <cstdlib>
#include <memory>

#include "gtest/gtest.h"

namespace tessel {
namespace {

Chunk Bytes(const std::string& s) {
  return Chunk(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

class CheckpointStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "memory") {
      store_ = std::make_unique<MemoryStore>();
    } else {
      const char* tmp = std::getenv("TEST_TMPDIR");
      std::string root = std::string(tmp ? tmp : "/tmp") + "/store-XXXXXX";
      ASSERT_NE(mkdtemp(root.data()), nullptr);
      store_ = std::make_unique<LocalFsStore>(root);
    }
  }
  std::unique_ptr<CheckpointStore> store_;
};

TEST_P(CheckpointStoreTest, PutGetReplaceAndRanges) {
  const std::string a = "hello ", b = "world";
  ASSERT_TRUE(store_->Put("job/step-1/f.bin", {Bytes(a), Bytes(b)}).ok());
  EXPECT_EQ(*store_->Get("job/step-1/f.bin"), "hello world");
  EXPECT_EQ(*store_->Size("job/step-1/f.bin"), 11);
  char buf[5];
  ASSERT_TRUE(store_->ReadRange("job/step-1/f.bin", 6, 5, buf).ok());
  EXPECT_EQ(std::string(buf, 5), "world");
  EXPECT_EQ(store_->ReadRange("job/step-1/f.bin", 8, 5, buf).code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(store_->Put("job/step-1/f.bin", {Bytes(b)}).ok());
  EXPECT_EQ(*store_->Get("job/step-1/f.bin"), "world");
  EXPECT_EQ(store_->Get("job/nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(CheckpointStoreTest, ListsSortedAndRemovesTrees) {
  ASSERT_TRUE(store_->Put("j/step-2/a", {Bytes("1")}).ok());
  ASSERT_TRUE(store_->Put("j/step-1/b", {Bytes("2")}).ok());
  ASSERT_TRUE(store_->Put("j/step-1/a", {Bytes("3")}).ok());
  EXPECT_EQ(*store_->List("j"), (std::vector<std::string>{"step-1", "step-2"}));
  EXPECT_EQ(*store_->List("j/step-1"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(store_->List("missing")->empty());
  ASSERT_TRUE(store_->RemoveAll("j/step-1").ok());
  EXPECT_EQ(*store_->List("j"), (std::vector<std::string>{"step-2"}));
}

TEST_P(CheckpointStoreTest, RefusesPathsOutsideTheStore) {
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../b", "a//b", "a/./b"}) {
    EXPECT_EQ(store_->Put(bad, {Bytes("x")}).code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store_->Get(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CheckpointStoreTest, ::testing::Values("memory", "localfs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tessel
