// Diagnose: progressing, stalled with the ranks that owe buckets (what each
// is doing, its lease and liveness), stalled on the servers, idle, and not
// started.
#include "client/why_verdict.h"

#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessel::ctl {
namespace {

constexpr int64_t kSecond = 1'000'000;

// Shard `index` of a 3-rank job at step 7 whose step started at 100 s;
// `owing`: slot -> buckets not pushed (of 4).
v1::ShardStats InProgress(int index, const std::vector<std::pair<int, std::vector<int>>>& owing) {
  v1::ShardStats st;
  st.set_shard_index(index);
  st.set_world_size(3);
  st.set_step(7);
  v1::StepWaiting* w = st.mutable_waiting();
  w->set_step(7);
  w->set_started_us(100 * kSecond);
  w->set_num_buckets(4);
  for (const auto& [slot, buckets] : owing) {
    v1::SlotWaiting* s = w->add_slots();
    s->set_slot(slot);
    for (int b : buckets) s->add_not_pushed(b);
  }
  return st;
}

v1::View Members() {
  v1::View v;
  for (int r = 0; r < 3; ++r) {
    v1::Member* m = v.add_members();
    m->set_role(v1::ROLE_WORKER);
    m->set_rank(r);
    m->set_host("h");
    m->set_pid(100 + r);
    m->mutable_liveness()->set_last_heartbeat_unix_ms(101'000);
    m->mutable_liveness()->set_lease_expires_unix_ms(105'000);
    m->mutable_liveness()->mutable_phases()->set_step(7);
    m->mutable_liveness()->mutable_phases()->set_compute_ns(9);
  }
  return v;
}

std::string AliveYes(const std::string& host, int64_t pid) {
  return "yes " + host + " " + std::to_string(pid);
}

TEST(WhyVerdictTest, AYoungStepIsProgressing) {
  const WhyReport w = Diagnose("j", {InProgress(0, {{1, {0, 1, 2, 3}}})}, Members(),
                               100 * kSecond + kSecond / 2, /*stalled_after_s=*/1, AliveYes);
  EXPECT_EQ(w.verdict, Verdict::kProgressing);
  EXPECT_EQ(WhyExitCode(w.verdict), 0);
  EXPECT_TRUE(w.culprits.empty());
}

TEST(WhyVerdictTest, NamesTheRankThatOwesBucketsWithItsStateOnEveryShard) {
  const std::vector<v1::ShardStats> shards = {InProgress(0, {{1, {0, 1, 2, 3}}}),
                                              InProgress(1, {{1, {0, 1, 2, 3}}})};
  const WhyReport w = Diagnose("j", shards, Members(), 103 * kSecond, 1, AliveYes);
  EXPECT_EQ(w.verdict, Verdict::kStalled);
  EXPECT_EQ(WhyExitCode(w.verdict), 7);
  EXPECT_EQ(w.step, 7);
  EXPECT_EQ(w.since_us, 100 * kSecond);
  ASSERT_EQ(w.culprits.size(), 1u);
  const Culprit& c = w.culprits[0];
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.pid, 101);
  ASSERT_EQ(c.owes.size(), 2u);
  EXPECT_EQ(c.owes[1].shard, 1);
  EXPECT_EQ(c.owes[1].not_pushed, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(c.doing, "computing") << "it reported finishing step 6 (its step is 7)";
  EXPECT_EQ(c.last_phase, "computing");
  EXPECT_EQ(c.last_heartbeat_unix_ms, 101'000);
  EXPECT_EQ(c.lease_expires_unix_ms, 105'000);
  EXPECT_EQ(c.alive, "yes h 101");
  const nlohmann::json j = WhyJson(w);
  EXPECT_EQ(j["verdict"], "stalled");
  EXPECT_EQ(j["culprits"][0]["rank"], 1);
  EXPECT_DOUBLE_EQ(j["culprits"][0]["heartbeat_age_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["age_s"].get<double>(), 3.0);
  std::ostringstream text;
  WhyText(w, text);
  EXPECT_NE(text.str().find("shard 1: buckets 0-3 not pushed (of 4)"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("lease expires in 2.0 s"), std::string::npos) << text.str();
}

TEST(WhyVerdictTest, ARankThatPushedPartOfTheStepIsPushingAndOneBehindIsBehind) {
  v1::View view = Members();
  view.mutable_members(2)->mutable_liveness()->mutable_phases()->set_step(6);
  // Rank 0 pushed buckets 0-1 at shard 0 and all of shard 1; rank 2 none.
  const std::vector<v1::ShardStats> shards = {InProgress(0, {{0, {2, 3}}, {2, {0, 1, 2, 3}}}),
                                              InProgress(1, {{2, {0, 1, 2, 3}}})};
  const WhyReport w = Diagnose("j", shards, view, 110 * kSecond, 1, AliveYes);
  ASSERT_EQ(w.culprits.size(), 2u);
  EXPECT_EQ(w.culprits[0].doing, "pushing");
  EXPECT_EQ(w.culprits[1].doing, "behind") << "its last reported step is 6, the step 7";
}

TEST(WhyVerdictTest, TheServersPullTimesOfTheStepBeforeSayWhatARankDoes) {
  v1::View view = Members();
  for (v1::Member& m : *view.mutable_members()) {
    m.mutable_liveness()->mutable_phases()->set_step(5);  // heartbeats lag
  }
  v1::ShardStats st = InProgress(0, {{0, {0, 1, 2, 3}}, {1, {0, 1, 2, 3}}, {2, {0, 1, 2, 3}}});
  v1::StepArrivals* before = st.add_flight();
  before->set_step(6);
  before->set_end_us(99 * kSecond);
  for (int64_t asked : {-1, 1, 2}) before->add_pull_asked_us(asked);
  for (int64_t served : {-1, 3, -1}) before->add_pull_served_us(served);
  const WhyReport w = Diagnose("j", {st}, view, 110 * kSecond, 1, AliveYes);
  ASSERT_EQ(w.culprits.size(), 3u);
  EXPECT_EQ(w.culprits[0].doing, "behind") << "it never pulled step 6's result";
  EXPECT_EQ(w.culprits[1].doing, "computing") << "served: in its own code";
  EXPECT_EQ(w.culprits[2].doing, "pulling") << "asked, not served yet";
}

TEST(WhyVerdictTest, AMissingMemberIsNotCheckedForLife) {
  v1::View view = Members();
  view.mutable_members()->DeleteSubrange(1, 1);
  bool asked = false;
  const WhyReport w = Diagnose("j", {InProgress(0, {{1, {0}}})}, view, 110 * kSecond, 1,
                               [&](const std::string&, int64_t) {
                                 asked = true;
                                 return std::string("yes");
                               });
  ASSERT_EQ(w.culprits.size(), 1u);
  EXPECT_FALSE(w.culprits[0].member);
  EXPECT_FALSE(asked);
  EXPECT_NE(w.culprits[0].alive.find("not a member"), std::string::npos);
}

TEST(WhyVerdictTest, EveryPushArrivedIsTheServersStall) {
  v1::ShardStats st = InProgress(0, {});
  st.mutable_waiting()->set_buckets_updated(3);
  st.mutable_waiting()->add_pulls_waiting(0);
  const WhyReport w = Diagnose("j", {st}, Members(), 110 * kSecond, 1, AliveYes);
  EXPECT_EQ(w.verdict, Verdict::kStalledOnServers);
  EXPECT_EQ(WhyExitCode(w.verdict), 8);
  ASSERT_EQ(w.notes.size(), 1u);
  EXPECT_NE(w.notes[0].find("3 of 4 buckets updated; pulls waiting from ranks 0"),
            std::string::npos)
      << w.notes[0];
}

TEST(WhyVerdictTest, AnIdleJobNamesEveryRankAndANewOneHasNotStarted) {
  v1::ShardStats st;
  st.set_world_size(3);
  st.set_step(8);
  const WhyReport fresh = Diagnose("j", {st}, Members(), 110 * kSecond, 1, AliveYes);
  EXPECT_EQ(fresh.verdict, Verdict::kNotStarted);
  EXPECT_EQ(WhyExitCode(fresh.verdict), 0);
  v1::StepArrivals* a = st.add_flight();
  a->set_step(7);
  a->set_end_us(100 * kSecond);
  EXPECT_EQ(Diagnose("j", {st}, Members(), 100 * kSecond + 10, 1, AliveYes).verdict,
            Verdict::kProgressing);
  const WhyReport idle = Diagnose("j", {st}, Members(), 105 * kSecond, 1, AliveYes);
  EXPECT_EQ(idle.verdict, Verdict::kStalled);
  EXPECT_EQ(idle.step, 8);
  ASSERT_EQ(idle.culprits.size(), 3u);
  EXPECT_TRUE(idle.culprits[0].owes.empty());
  EXPECT_EQ(idle.culprits[0].doing, "behind") << "its last reported step is 7, the step 8";
}

}  // namespace
}  // namespace tessel::ctl
