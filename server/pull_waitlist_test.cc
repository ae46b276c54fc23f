// PullWaitlist: every waiting pull gets each bucket of its range once, as
// soon as the step updates it or when the version is reached; a pull that
// arrives mid-step gets what is updated already; notify pulls wait for the
// whole step.
#include "server/pull_waitlist.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

Puller Pull(int rank, int64_t version, int first, int count) {
  return Puller{static_cast<uint64_t>(100 + rank), rank, version, first, count, {}};
}

// Per rank, the buckets `serve` sends (all at `version`).
std::map<int, std::vector<int>> Sent(const std::vector<Puller>& serve, int64_t version) {
  std::map<int, std::vector<int>> out;
  for (const Puller& p : serve) {
    EXPECT_EQ(p.version, version);
    for (int b : p.buckets) out[p.rank].push_back(b);
  }
  return out;
}

TEST(PullWaitlistTest, EachBucketGoesOnceAsSoonAsItIsUpdated) {
  PullWaitlist pulls(4);
  EXPECT_FALSE(pulls.Add(Pull(0, 1, 0, 4)).has_value()) << "nothing is updated yet";
  EXPECT_FALSE(pulls.Add(Pull(1, 1, 0, 4)).has_value());
  for (int b : {2, 0, 3}) {
    std::vector<Puller> serve;
    pulls.BucketUpdated(1, b, &serve);
    EXPECT_EQ(Sent(serve, 1), (std::map<int, std::vector<int>>{{0, {b}}, {1, {b}}}));
  }
  std::vector<Puller> last;
  pulls.BucketUpdated(1, 1, &last);
  EXPECT_EQ(Sent(last, 1), (std::map<int, std::vector<int>>{{0, {1}}, {1, {1}}}));
  std::vector<Puller> done;
  pulls.Reached(1, &done);
  ASSERT_EQ(done.size(), 2u) << "the pulls leave the list";
  EXPECT_TRUE(done[0].buckets.empty()) << "nothing was still missing";
  EXPECT_TRUE(pulls.empty());
}

TEST(PullWaitlistTest, APullArrivingMidStepGetsTheUpdatedBucketsOfItsRange) {
  PullWaitlist pulls(4);
  std::vector<Puller> serve;
  pulls.BucketUpdated(1, 1, &serve);
  pulls.BucketUpdated(1, 3, &serve);
  EXPECT_TRUE(serve.empty()) << "nobody pulled yet";
  std::optional<Puller> all = pulls.Add(Pull(0, 1, 0, 4));
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->buckets, (std::vector<int>{1, 3}));
  std::optional<Puller> part = pulls.Add(Pull(1, 1, 2, 2));  // FSDP: one unit's buckets
  ASSERT_TRUE(part.has_value());
  EXPECT_EQ(part->buckets, (std::vector<int>{3}));
  pulls.BucketUpdated(1, 0, &serve);
  EXPECT_EQ(Sent(serve, 1), (std::map<int, std::vector<int>>{{0, {0}}}));
  serve.clear();
  pulls.Reached(1, &serve);
  EXPECT_EQ(Sent(serve, 1), (std::map<int, std::vector<int>>{{0, {2}}, {1, {2}}}))
      << "the step's end sends only what was still missing";
  EXPECT_FALSE(pulls.Add(Pull(0, 2, 0, 4)).has_value()) << "a new step starts with nothing updated";
}

TEST(PullWaitlistTest, NotifyPullsWaitForTheWholeStep) {
  PullWaitlist pulls(2);
  EXPECT_FALSE(pulls.Add(Pull(0, 1, 0, 0)).has_value());
  std::vector<Puller> serve;
  pulls.BucketUpdated(1, 0, &serve);
  EXPECT_TRUE(serve.empty());
  pulls.Reached(1, &serve);
  ASSERT_EQ(serve.size(), 1u);
  EXPECT_EQ(serve[0].bucket_count, 0);
  EXPECT_TRUE(serve[0].buckets.empty()) << "a notify carries no bucket";
}

TEST(PullWaitlistTest, PullsOfOtherVersionsWaitAndCanBeTakenOrListed) {
  PullWaitlist pulls(2);
  pulls.Add(Pull(2, 1, 0, 2));
  pulls.Add(Pull(0, 1, 0, 2));
  pulls.Add(Pull(2, 1, 0, 1));
  pulls.Add(Pull(1, 2, 0, 2));
  EXPECT_EQ(pulls.RanksWaitingFor(1), (std::vector<int>{0, 2}));
  std::vector<Puller> serve;
  pulls.BucketUpdated(2, 0, &serve);
  EXPECT_EQ(Sent(serve, 2), (std::map<int, std::vector<int>>{{1, {0}}}))
      << "only the pulls of that step";
  serve.clear();
  pulls.Reached(1, &serve);
  EXPECT_EQ(serve.size(), 3u);
  std::vector<Puller> left = pulls.TakeAll();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rank, 1);
  EXPECT_TRUE(pulls.empty());
}

}  // namespace
}  // namespace tessel
