// CombineRanks: a rank's servers' view (max lateness and score over shards,
// summed bytes, step rate) beside its registry record (host, pid, pod,
// phase), and the columns left unknown where the servers record host groups.
#include "client/rank_view.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessel::ctl {
namespace {

// A shard's stats for a `world`-rank job whose steps 10..19 each took
// 100 ms; rank `slow` pushes `late_us` after the others.
v1::ShardStats Shard(int index, int world, int slow, int64_t late_us) {
  v1::ShardStats st;
  st.set_shard_index(index);
  st.set_range_begin(0);
  st.set_range_end(10);
  st.set_step(20);
  st.set_world_size(world);
  for (int s = 10; s < 20; ++s) {
    v1::StepArrivals* a = st.add_flight();
    a->set_step(s);
    const int64_t t0 = s * 100000;
    for (int r = 0; r < world; ++r) {
      const int64_t at = t0 + 1000 + (r == slow ? late_us : 0);
      a->add_first_push_us(at);
      a->add_last_push_us(at);
      a->add_pull_asked_us(at + 10);
      a->add_pull_served_us(t0 + 99000);
    }
    a->set_end_us(t0 + 99000);
  }
  for (int r = 0; r < world; ++r) {
    st.add_rank_pushed_bytes(1000 * (r + 1));
    st.add_rank_pulled_bytes(2000);
  }
  return st;
}

v1::Member Worker(int rank, int64_t step, int64_t compute_ns, int64_t wait_ns) {
  v1::Member m;
  m.set_role(v1::ROLE_WORKER);
  m.set_rank(rank);
  m.set_host("h");
  m.set_pid(100 + rank);
  m.mutable_liveness()->set_last_heartbeat_unix_ms(5000);
  v1::StepPhases* p = m.mutable_liveness()->mutable_phases();
  p->set_step(step);
  p->set_compute_ns(compute_ns);
  p->set_wait_ns(wait_ns);
  return m;
}

TEST(RankViewTest, CombinesShardsAndTheRegistryPerRank) {
  std::vector<v1::ShardStats> stats = {Shard(0, 3, 2, 30000), Shard(1, 3, 2, 50000)};
  // Shard 0 has scored the window: its median lateness and score count.
  v1::RankScore* s = stats[0].add_rank_scores();
  s->set_rank(2);
  s->set_score(3.0);
  s->set_lateness_seconds(0.03);
  v1::View view;
  *view.add_members() = Worker(0, 20, 100, 300);
  *view.add_members() = Worker(2, 20, 300, 10);
  view.mutable_members(1)->set_pod("train-2");
  const TopSnapshot top = CombineRanks("j", stats, view, /*now_us=*/6'500'000);
  ASSERT_EQ(top.ranks.size(), 3u);
  EXPECT_EQ(top.step, 20);
  const RankRow& r2 = top.ranks[2];
  EXPECT_EQ(r2.host, "h");
  EXPECT_EQ(r2.pid, 102);
  EXPECT_EQ(r2.pod, "train-2");
  EXPECT_EQ(r2.phase, "computing");
  EXPECT_EQ(top.ranks[0].phase, "waiting");
  EXPECT_EQ(r2.step, 19) << "the newest step it pushed";
  EXPECT_EQ(r2.reported_step, 20) << "its heartbeats'";
  ASSERT_TRUE(r2.lateness_s.has_value());
  EXPECT_DOUBLE_EQ(*r2.lateness_s, 0.05) << "shard 1's newest step (unscored) is the later";
  ASSERT_TRUE(r2.score.has_value());
  EXPECT_DOUBLE_EQ(*r2.score, 3.0);
  EXPECT_TRUE(r2.straggler);
  EXPECT_FALSE(top.ranks[0].straggler);
  EXPECT_FALSE(top.ranks[0].score.has_value()) << "no shard scored rank 0";
  EXPECT_EQ(*r2.pushed_bytes, 6000);
  EXPECT_EQ(*r2.pulled_bytes, 4000);
  ASSERT_TRUE(r2.steps_per_s.has_value());
  EXPECT_NEAR(*r2.steps_per_s, 10.0, 1e-9);
  EXPECT_FALSE(top.ranks[1].member) << "rank 1 is not in the registry's group";
  const nlohmann::json j = TopJson(top);
  EXPECT_EQ(j["ranks"][2]["phase"], "computing");
  EXPECT_EQ(j["ranks"][2]["straggler"], true);
  EXPECT_DOUBLE_EQ(j["ranks"][2]["heartbeat_age_s"].get<double>(), 1.5);
  EXPECT_TRUE(j["ranks"][1]["host"].is_null());
  EXPECT_EQ(TopTable(top)[2][7], "3.00 SLOW");
}

TEST(RankViewTest, ALateRankBelowTheRulesFloorIsNotAStraggler) {
  std::vector<v1::ShardStats> stats = {Shard(0, 2, 1, 5000)};
  v1::RankScore* s = stats[0].add_rank_scores();
  s->set_rank(1);
  s->set_score(2.0);
  s->set_lateness_seconds(0.005);  // 5 ms: under min_lateness (20 ms)
  const TopSnapshot top = CombineRanks("j", stats, v1::View(), 0);
  EXPECT_FALSE(top.ranks[1].straggler);
}

TEST(RankViewTest, HostGroupsLeaveTheServerColumnsUnknown) {
  v1::ShardStats st = Shard(0, 2, 1, 0);
  st.set_world_size(4);  // 4 ranks in 2 host groups: the recorder's slots are groups
  v1::View view;
  *view.add_members() = Worker(3, 7, 1, 0);
  const TopSnapshot top = CombineRanks("j", {st}, view, 0);
  ASSERT_EQ(top.ranks.size(), 4u);
  for (const RankRow& r : top.ranks) {
    EXPECT_FALSE(r.lateness_s.has_value());
    EXPECT_FALSE(r.pushed_bytes.has_value());
    EXPECT_FALSE(r.steps_per_s.has_value());
  }
  EXPECT_EQ(top.ranks[3].phase, "computing");
}

TEST(RankViewTest, WorkerIdsMapRanksToRegistryRanks) {
  v1::ShardStats st = Shard(0, 2, 1, 0);
  st.add_worker_ids(5);
  st.add_worker_ids(6);
  v1::View view;
  *view.add_members() = Worker(6, 3, 0, 9);
  const TopSnapshot top = CombineRanks("j", {st}, view, 0);
  EXPECT_EQ(top.ranks[1].registry_rank, 6);
  EXPECT_TRUE(top.ranks[1].member);
  EXPECT_FALSE(top.ranks[0].member);
  EXPECT_EQ(TopTable(top)[1][0], "1 (6)");
}

TEST(RankViewTest, DominantPhase) {
  v1::StepPhases p;
  EXPECT_EQ(DominantPhase(p), "");
  p.set_pull_ns(5);
  EXPECT_EQ(DominantPhase(p), "pulling");
  p.set_push_ns(6);
  EXPECT_EQ(DominantPhase(p), "pushing");
}

}  // namespace
}  // namespace tessel::ctl
