#include "registry/status_page.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "proto/shard.grpc.pb.h"
#include "rpc/grpc_util.h"
#include "runtime/log.h"

namespace tessel {

using nlohmann::json;

StatusPage::StatusPage(RegistryService* service, ClientCredentials credentials)
    : service_(service), credentials_(std::move(credentials)) {}

void StatusPage::SetAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  address_ = address;
}

void StatusPage::SetSecurity(const std::string& security) {
  absl::MutexLock lock(&mu_);
  security_ = security;
  computed_ = absl::InfinitePast();
}

std::vector<HttpPage> StatusPage::Pages() {
  return {{"/status", "text/html; charset=utf-8", [] { return Html(); }},
          {"/status.json", "application/json", [this] { return Json(); }}};
}

std::string StatusPage::Json() {
  absl::MutexLock lock(&mu_);
  if (absl::Now() - computed_ < absl::Seconds(1)) return cached_;
  cached_ = Compute();
  computed_ = absl::Now();
  return cached_;
}

namespace {

// Per finished step of one shard's flight recorder, each rank's lateness
// (its last push after the first rank's, seconds): the status page's heat
// map (steps x ranks); and the shard's scores.
json LatenessHeatMap(const v1::ShardStats& st) {
  json out = {{"shard", st.shard_index()},
              {"steps", json::array()},
              {"seconds", json::array()},
              {"scores", json::array()}};
  for (const v1::StepArrivals& a : st.flight()) {
    if (a.end_us() < 0 || a.last_push_us_size() == 0) continue;
    const int64_t first = *std::min_element(a.last_push_us().begin(), a.last_push_us().end());
    if (first < 0) continue;
    json row = json::array();
    for (int64_t t : a.last_push_us()) row.push_back(static_cast<double>(t - first) / 1e6);
    out["steps"].push_back(a.step());
    out["seconds"].push_back(row);
  }
  for (const v1::RankScore& r : st.rank_scores()) out["scores"].push_back(r.score());
  return out;
}

}  // namespace

std::string StatusPage::Compute() {
  const absl::Time now = absl::Now();
  json out = {{"time", FormatRfc3339Utc(now)}, {"registry", address_},  {"security", security_},
              {"members", json::array()},      {"jobs", json::array()}, {"errors", json::array()},
              {"stragglers", json::array()}};
  auto groups = service_->registry().ListGroups();
  if (!groups.ok()) {
    out["errors"].push_back(absl::StrCat("registry: ", groups.status().message()));
    return out.dump();
  }
  std::map<std::string, int> workers;  // registered workers per job group
  std::map<std::pair<std::string, int>, const v1::Member*> worker_at;  // (group, rank)
  std::vector<std::pair<std::string, std::string>> servers;            // (pool, address)
  for (const v1::View& v : *groups) {
    for (const v1::Member& m : v.members()) {
      const bool server = m.role() == v1::ROLE_SERVER;
      out["members"].push_back({{"group", v.group()},
                                {"role", server ? "server" : "worker"},
                                {"rank", m.rank()},
                                {"address", m.grpc_address()},
                                {"host", m.host()}});
      if (server) {
        servers.emplace_back(v.group(), m.grpc_address());
      } else {
        ++workers[v.group()];
        worker_at[{v.group(), m.rank()}] = &m;
      }
    }
  }
  // Jobs as the shard servers hold them.
  struct JobRow {
    v1::ShardStats first;
    int64_t step_min = INT64_MAX;
    int64_t step_max = 0;
    int shards = 0;
    std::string server;  // one that has it (for ListCheckpoints)
    // The oldest step since which some shard's checkpoints fail (-1: none),
    // and that shard's error.
    int64_t failing_since = -1;
    std::string failing_error;
  };
  std::map<std::string, JobRow> jobs;
  for (const auto& [pool, address] : servers) {
    if (address.empty()) continue;
    auto stub = v1::ShardServer::NewStub(MakeChannel(address, credentials_));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(1));
    v1::ListJobsResponse resp;
    grpc::Status s = stub->ListJobs(&ctx, v1::ListJobsRequest(), &resp);
    if (!s.ok()) {
      out["errors"].push_back(
          absl::StrCat("pool ", pool, " server ", address, ": ", s.error_message()));
      continue;
    }
    for (const v1::ShardStats& st : resp.jobs()) {
      JobRow& row = jobs[st.job()];
      if (row.shards == 0) {
        row.first = st;
        row.server = address;
      }
      ++row.shards;
      row.step_min = std::min(row.step_min, st.step());
      row.step_max = std::max(row.step_max, st.step());
      if (st.checkpoint_failing_since() >= 0 &&
          (row.failing_since < 0 || st.checkpoint_failing_since() < row.failing_since)) {
        row.failing_since = st.checkpoint_failing_since();
        row.failing_error = st.checkpoint_error();
      }
    }
  }
  // The ranks the servers name stragglers, with their host and pid.
  for (const v1::Straggler& st : service_->stragglers().All()) {
    json j = {{"job", st.job()},
              {"rank", st.rank()},
              {"registry_rank", st.registry_rank()},
              {"score", st.score()},
              {"lateness_s", st.lateness_seconds()},
              {"shard", st.shard()},
              {"since", FormatRfc3339Utc(absl::FromUnixMillis(st.since_unix_ms()))},
              {"host", nullptr},
              {"pid", nullptr}};
    auto m = worker_at.find({st.job(), st.registry_rank()});
    if (m != worker_at.end()) {
      j["host"] = m->second->host();
      j["pid"] = m->second->pid();
    }
    out["stragglers"].push_back(j);
  }
  const auto progress = service_->Progress();
  const auto phases = service_->Phases();
  std::set<std::string> live;
  for (auto& [name, row] : jobs) {
    live.insert(name);
    json j = {{"name", name},
              {"strategy", row.first.strategy()},
              {"world_size", row.first.world_size()},
              {"workers", workers.count(name) ? workers[name] : 0},
              {"shards", row.shards},
              {"num_shards", row.first.num_shards()},
              {"num_params", row.first.num_params()},
              {"step", row.step_min},
              {"epoch", row.first.epoch()},
              {"recoveries", row.first.recoveries()},
              {"steps_per_s", nullptr},
              {"checkpoint", nullptr},
              {"checkpoints_failing_since", nullptr},
              {"checkpoint_error", nullptr},
              {"loss", json::array()},
              {"lateness", LatenessHeatMap(row.first)}};
    if (row.failing_since >= 0) {
      j["checkpoints_failing_since"] = row.failing_since;
      j["checkpoint_error"] = row.failing_error;
    }
    // Steps per second over the last 30 s of polls.
    auto& h = history_[name];
    h.emplace_back(now, row.step_min);
    while (h.size() > 2 && now - h.front().first > absl::Seconds(30)) h.pop_front();
    if (h.size() >= 2 && h.back().first > h.front().first) {
      j["steps_per_s"] = (h.back().second - h.front().second) /
                         absl::ToDoubleSeconds(h.back().first - h.front().first);
    }
    // The newest complete checkpoint and its age.
    auto stub = v1::ShardServer::NewStub(MakeChannel(row.server, credentials_));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(1));
    v1::JobRef ref;
    ref.set_job(name);
    v1::ListCheckpointsResponse list;
    if (stub->ListCheckpoints(&ctx, ref, &list).ok() && list.checkpoints_size() > 0) {
      const v1::CheckpointInfo& c = list.checkpoints(list.checkpoints_size() - 1);
      j["checkpoint"] = {
          {"step", c.step()},
          {"created", FormatRfc3339Utc(absl::FromUnixMillis(c.created_unix_ms()))},
          {"age_s", absl::ToDoubleSeconds(now - absl::FromUnixMillis(c.created_unix_ms()))}};
    }
    // Each worker's last step phases (registry rank), for "computing" or
    // "slow link" beside the servers' lateness.
    j["phases"] = json::array();
    if (auto ph = phases.find(name); ph != phases.end()) {
      for (const auto& [rank, rp] : ph->second) {
        j["phases"].push_back(
            {{"registry_rank", rank},
             {"step", rp.phases.step()},
             {"compute_s", rp.phases.compute_ns() / 1e9},
             {"push_s", rp.phases.push_ns() / 1e9},
             {"wait_s", rp.phases.wait_ns() / 1e9},
             {"pull_s", rp.phases.pull_ns() / 1e9},
             {"age_s", absl::ToDoubleSeconds(now - absl::FromUnixMillis(rp.unix_ms))}});
      }
    }
    auto p = progress.find(name);
    if (p != progress.end()) {
      for (const auto& point : p->second) j["loss"].push_back({point.step, point.loss});
    }
    out["jobs"].push_back(j);
  }
  for (auto it = history_.begin(); it != history_.end();) {
    it = live.count(it->first) ? std::next(it) : history_.erase(it);
  }
  return out.dump();
}

std::string StatusPage::Html() {
  return R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Tessel status</title>
<style>
 body { font-family: sans-serif; margin: 20px; color: #222; }
 h1 { font-size: 20px; margin: 0 0 4px 0; } h2 { font-size: 16px; margin: 18px 0 6px 0; }
 table { border-collapse: collapse; } td, th { padding: 3px 10px; text-align: left; }
 th { background: #eee; } tr:nth-child(even) td { background: #f7f7f7; }
 .muted { color: #777; } .err { color: #b00; } .job { margin: 10px 0 16px 0; }
 svg { border: 1px solid #ccc; background: #fff; }
</style></head>
<body>
<h1>Tessel</h1>
<div class="muted" id="meta">loading...</div>
<div id="insecure" class="err" style="display:none"><b>INSECURE</b>: this registry runs with
--insecure: no credentials, anyone who can reach it can join, leave and list every group.</div>
<div id="errors" class="err"></div>
<h2>Jobs</h2>
<table id="jobs"><thead><tr><th>job</th><th>strategy</th><th>workers</th><th>shards</th>
<th>parameters</th><th>step</th><th>steps/s</th><th>epoch</th><th>recoveries</th>
<th>newest checkpoint</th><th>checkpoint age</th></tr></thead><tbody></tbody></table>
<h2>Stragglers</h2>
<table id="stragglers"><thead><tr><th>job</th><th>rank</th><th>score</th><th>late by</th>
<th>host</th><th>pid</th><th>since</th><th>named by</th></tr></thead><tbody></tbody></table>
<div id="plots"></div>
<h2>Members</h2>
<table id="members"><thead><tr><th>group</th><th>role</th><th>rank</th><th>address</th>
<th>host</th></tr></thead><tbody></tbody></table>
<script>
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c])); }
function age(s) { if (s == null) return "-"; if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min"; return (s / 3600).toFixed(1) + " h"; }
function plot(job) {
  const pts = job.loss; const W = 570, H = 200, L = 60, B = 28;
  if (pts.length < 2) return '<div class="muted">loss of ' + esc(job.name) +
      ': no points yet (rank 0 reports them with Worker::ReportLoss)</div>';
  const xs = pts.map(p => p[0]), ys = pts.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = s => L + (s - x0) / Math.max(1, x1 - x0) * (W - L - 10);
  const sy = v => H - B - (v - y0) / Math.max(1e-12, y1 - y0) * (H - B - 10);
  const line = pts.map(p => sx(p[0]).toFixed(1) + ',' + sy(p[1]).toFixed(1)).join(' ');
  return '<div class="job"><b>' + esc(job.name) + '</b> loss by step (rank 0)<br>' +
    '<svg class="loss" data-job="' + esc(job.name) + '" width="' + W + '" height="' + H + '">' +
    '<line x1="' + L + '" y1="' + (H - B) + '" x2="' + (W - 10) + '" y2="' + (H - B) + '" stroke="#999"/>' +
    '<line x1="' + L + '" y1="10" x2="' + L + '" y2="' + (H - B) + '" stroke="#999"/>' +
    '<text x="' + L + '" y="' + (H - 8) + '" font-size="11">' + x0 + '</text>' +
    '<text x="' + (W - 10) + '" y="' + (H - 8) + '" font-size="11" text-anchor="end">' + x1 + '</text>' +
    '<text x="' + (L - 4) + '" y="' + (H - B) + '" font-size="11" text-anchor="end">' + y0.toPrecision(3) + '</text>' +
    '<text x="' + (L - 4) + '" y="16" font-size="11" text-anchor="end">' + y1.toPrecision(3) + '</text>' +
    '<polyline fill="none" stroke="#d62728" stroke-width="3" points="' + line + '"/></svg></div>';
}
function heat(job) {
  const h = job.lateness; if (!h || h.steps.length == 0) return '';
  const ranks = h.seconds[0].length, C = 14, L = 84, T = 16;
  // Full colour from 20 ms up (the straggler rule's floor): jitter stays faint.
  const max = Math.max(0.02, ...h.seconds.flat());
  let cells = '';
  h.seconds.forEach((row, i) => row.forEach((v, r) => {
    const a = (v / max).toFixed(2);
    cells += '<rect x="' + (L + i * C) + '" y="' + (T + r * C) + '" width="' + (C - 1) + '" height="' +
      (C - 1) + '" fill="rgba(214,39,40,' + a + ')"><title>step ' + h.steps[i] + ' rank ' + r +
      ': ' + (v * 1000).toFixed(1) + ' ms late</title></rect>'; }));
  let labels = '';
  for (let r = 0; r < ranks; r++) labels += '<text x="' + (L - 4) + '" y="' + (T + r * C + 10) +
      '" font-size="10" text-anchor="end">rank ' + r + (h.scores.length > r ? ' (' +
      h.scores[r].toFixed(1) + ')' : '') + '</text>';
  return '<div class="job"><b>' + esc(job.name) + '</b> lateness per step and rank (shard ' +
    h.shard + '; darker = later, max ' + (max * 1000).toFixed(0) + ' ms)<br><svg class="heat" ' +
    'data-job="' + esc(job.name) + '" width="' + (L + h.steps.length * C + 10) + '" height="' +
    (T + ranks * C + 6) + '">' + labels + cells + '</svg></div>';
}
async function refresh() {
  try {
    const r = await fetch('status.json', {cache: 'no-store'}); const s = await r.json();
    document.getElementById('meta').textContent = 'registry ' + s.registry + ' \u00b7 ' + s.time +
        ' \u00b7 ' + s.members.length + ' members, ' + s.jobs.length + ' jobs \u00b7 callers: ' +
        (s.security || 'unknown') + ' \u00b7 refreshes every 2 s';
    document.getElementById('insecure').style.display = s.security === 'insecure' ? '' : 'none';
    document.getElementById('errors').innerHTML = s.errors.map(esc).join('<br>');
    document.querySelector('#jobs tbody').innerHTML = s.jobs.map(j => '<tr><td>' + esc(j.name) +
        '</td><td>' + esc(j.strategy) + '</td><td>' + j.workers + '/' + j.world_size + '</td><td>' +
        j.shards + '/' + j.num_shards + '</td><td>' + j.num_params + '</td><td>' + j.step +
        '</td><td>' + (j.steps_per_s == null ? '-' : j.steps_per_s.toFixed(1)) + '</td><td>' +
        j.epoch + '</td><td>' + j.recoveries + '</td><td>' +
        (j.checkpoint ? j.checkpoint.step : '-') +
        (j.checkpoints_failing_since == null ? '' : '<br><span class="err" title="' +
            esc(j.checkpoint_error) + '">failing since step ' + j.checkpoints_failing_since +
            '</span>') + '</td><td>' +
        age(j.checkpoint ? j.checkpoint.age_s : null) + '</td></tr>').join('');
    document.getElementById('plots').innerHTML = s.jobs.map(j => plot(j) + heat(j)).join('');
    document.querySelector('#stragglers tbody').innerHTML = s.stragglers.map(g => '<tr><td>' +
        esc(g.job) + '</td><td>' + g.rank + '</td><td>' + g.score.toFixed(2) + '</td><td>' +
        (g.lateness_s * 1000).toFixed(0) + ' ms</td><td>' + esc(g.host || '-') + '</td><td>' +
        (g.pid || '-') + '</td><td>' + esc(g.since) + '</td><td>shard ' + g.shard +
        '</td></tr>').join('');
    document.querySelector('#members tbody').innerHTML = s.members.map(m => '<tr><td>' +
        esc(m.group) + '</td><td>' + m.role + '</td><td>' + m.rank + '</td><td>' +
        esc(m.address || '-') + '</td><td>' + esc(m.host) + '</td></tr>').join('');
  } catch (e) {
    document.getElementById('errors').textContent = 'cannot read status.json: ' + e;
  }
}
refresh(); setInterval(refresh, 2000);
</script>
</body></html>
)HTML";
}

}  // namespace tessel
