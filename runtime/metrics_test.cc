#include "runtime/metrics.h"

#include <gtest/gtest.h>

#include <thread>

namespace tessel::metrics {
namespace {

TEST(MetricsTest, CountersAndGaugesExposeHelpTypeAndLabelledSamples) {
  Registry r;
  Family& frames = r.AddCounter("t_frames_total", "frames received", {"shard", "type"});
  frames.GetCounter({"0", "push"})->Add(3);
  frames.GetCounter({"0", "pull"})->Add();
  r.AddGauge("t_depth", "queue depth", {}).GetGauge({})->Set(2.5);
  EXPECT_EQ(r.Expose(),
            "# HELP t_depth queue depth\n# TYPE t_depth gauge\nt_depth 2.5\n"
            "# HELP t_frames_total frames received\n# TYPE t_frames_total counter\n"
            "t_frames_total{shard=\"0\",type=\"pull\"} 1\n"
            "t_frames_total{shard=\"0\",type=\"push\"} 3\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  Registry r;
  Histogram* h =
      r.AddHistogram("t_seconds", "step time", {"job"}, {0.1, 1, 10}).GetHistogram({"a"});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h->Observe(v);
  EXPECT_EQ(r.Expose(),
            "# HELP t_seconds step time\n# TYPE t_seconds histogram\n"
            "t_seconds_bucket{job=\"a\",le=\"0.1\"} 2\n"
            "t_seconds_bucket{job=\"a\",le=\"1\"} 3\n"
            "t_seconds_bucket{job=\"a\",le=\"10\"} 4\n"
            "t_seconds_bucket{job=\"a\",le=\"+Inf\"} 5\n"
            "t_seconds_sum{job=\"a\"} 55.65\n"
            "t_seconds_count{job=\"a\"} 5\n");
}

TEST(MetricsTest, ValuesReadBackExactly) {
  Registry r;
  Family& f = r.AddGauge("t_v", "v", {"k"});
  f.GetGauge({"epoch"})->Set(1795573200123456.0);
  f.GetGauge({"start"})->Set(1795573200.25);
  f.GetGauge({"tenth"})->Set(0.1);
  f.GetGauge({"third"})->Set(1.0 / 3);
  const std::string text = r.Expose();
  EXPECT_NE(text.find("t_v{k=\"epoch\"} 1795573200123456\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_v{k=\"start\"} 1795573200.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_v{k=\"tenth\"} 0.1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_v{k=\"third\"} 0.33333333333333331\n"), std::string::npos) << text;
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.AddGauge("t_g", "a \\ b\nc", {"job"}).GetGauge({"x\"y\\z\nw"})->Set(1);
  EXPECT_EQ(r.Expose(),
            "# HELP t_g a \\\\ b\\nc\n# TYPE t_g gauge\nt_g{job=\"x\\\"y\\\\z\\nw\"} 1\n");
}

TEST(MetricsTest, CollectorsRunBeforeEachExpositionUntilTheirHandleDies) {
  Registry r;
  Gauge* g = r.AddGauge("t_live", "set when scraped", {}).GetGauge({});
  int runs = 0;
  {
    Registry::CollectorHandle h = r.AddCollector([&] { g->Set(++runs); });
    EXPECT_NE(r.Expose().find("t_live 1\n"), std::string::npos);
    EXPECT_NE(r.Expose().find("t_live 2\n"), std::string::npos);
  }
  r.Expose();
  EXPECT_EQ(runs, 2);
}

TEST(MetricsTest, SeriesOfAnEndedJobAreRemoved) {
  Registry r;
  Family& f = r.AddCounter("t_c", "c", {"job", "shard"});
  f.GetCounter({"a", "0"})->Add();
  f.GetCounter({"a", "1"})->Add();
  f.GetCounter({"b", "0"})->Add();
  f.RemoveMatching("job", "a");
  EXPECT_EQ(r.Expose(), "# HELP t_c c\n# TYPE t_c counter\nt_c{job=\"b\",shard=\"0\"} 1\n");
  f.Remove({"b", "0"});
  EXPECT_EQ(r.Expose(), "") << "a family with no series is left out";
}

TEST(MetricsTest, AddingAFamilyAgainSharesIt) {
  Registry r;
  Family& a = r.AddCounter("t_shared", "x", {"job"});
  Family& b = r.AddCounter("t_shared", "x", {"job"});
  EXPECT_EQ(&a, &b);
  EXPECT_DEATH(r.AddGauge("t_shared", "x", {"job"}), "another type");
  EXPECT_DEATH(a.GetCounter({"too", "many"}), "2 label values");
  EXPECT_DEATH(a.GetGauge({"j"}), "not a gauge");
}

TEST(MetricsTest, DisabledRecordsNothing) {
  Registry r;
  Counter* c = r.AddCounter("t_off", "c", {}).GetCounter({});
  SetEnabled(false);
  c->Add(5);
  SetEnabled(true);
  c->Add(1);
  EXPECT_EQ(c->value(), 1);
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  Registry r;
  Counter* c = r.AddCounter("t_n", "n", {}).GetCounter({});
  Histogram* h = r.AddHistogram("t_h", "h", {}, ExponentialBuckets(1, 2, 4)).GetHistogram({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Add();
        h->Observe(3);
      }
    });
  }
  std::thread scraper([&] {
    for (int i = 0; i < 50; ++i) r.Expose();
  });
  for (auto& t : threads) t.join();
  scraper.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(h->count(), 40000u);
  EXPECT_EQ(h->sum(), 120000);
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

}  // namespace
}  // namespace tessel::metrics
