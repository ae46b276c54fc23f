#include "client/context.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "core/status_macros.h"

namespace tessel::ctl {
namespace {

// FromGrpc's TLS hints (rpc/tls.cc): the connection was refused for its
// credentials, not because nobody listens.
bool IsTlsRefusal(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable &&
         (absl::StrContains(s.message(), "TLS handshake failed") ||
          absl::StrContains(s.message(), "refused this client's certificate"));
}

}  // namespace

int ExitFor(const absl::Status& s) {
  if (IsTlsRefusal(s)) return kAuth;
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return kOk;
    case absl::StatusCode::kNotFound:
      return kNotFound;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kUnavailable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kAuth;
    case absl::StatusCode::kDataLoss:
      return kDamaged;
    case absl::StatusCode::kInvalidArgument:
      return kUsage;
    default:
      return kFailed;
  }
}

int Fail(const absl::Status& s) {
  std::cerr << "tesselctl: " << s.message() << "\n";
  if ((s.code() == absl::StatusCode::kUnavailable ||
       s.code() == absl::StatusCode::kDeadlineExceeded) &&
      !IsTlsRefusal(s)) {
    std::cerr << "hint: is the registry at --registry (or $TESSEL_REGISTRY) running, and are "
                 "the shard servers up? `tesselctl members` lists who is alive.\n";
  }
  return ExitFor(s);
}

void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows, std::ostream& os) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
    }
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t c = 0; c < r.size(); ++c) {
      out += r[c];
      if (c + 1 < r.size()) out += std::string(width[c] - r[c].size() + 2, ' ');
    }
    os << out << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / double(1 << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.2f MiB", b / double(1 << 20));
  if (b >= (1 << 10)) return absl::StrFormat("%.1f KiB", b / 1024.0);
  return absl::StrCat(b, " B");
}

Cluster::Cluster(const Globals& g)
    : g_(g),
      registry_(g.registry, g.credentials, g.token),
      fleet_(
          {.credentials = g.credentials, .token = g.token, .timeout = absl::Seconds(g.timeout_s)}) {
}

absl::Status Cluster::ConnectServers() {
  TESSEL_ASSIGN_OR_RETURN(auto view, registry_.GetView(g_.pool));
  if (fleet_.ConnectView(view) == 0) {
    return absl::NotFoundError(absl::StrCat("no shard servers registered in pool '", g_.pool,
                                            "' at registry ", g_.registry));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ShardRow>> CollectShards(const Cluster& c, const std::string& job) {
  const ShardFleet& fleet = c.fleet();
  v1::JobRef ref;
  ref.set_job(job);
  std::vector<ShardRow> rows;
  bool any = false;
  const absl::Status first_failure = fleet.ForAll([&](int shard) {
    const std::string& address = fleet.address(shard);
    v1::ShardStats st;
    absl::Status s = fleet.CallWithPrefix(shard, &v1::ShardServer::Stub::GetStats, ref, &st,
                                          absl::StrCat("shard ", shard, " (", address, ")"));
    any = any || s.ok();
    rows.push_back(
        {shard, address,
         s.ok() ? absl::StatusOr<v1::ShardStats>(st) : absl::StatusOr<v1::ShardStats>(s)});
    return s;
  });
  if (!any && !rows.empty()) return first_failure;
  return rows;
}

v1::CheckpointRef CheckpointRef(const std::string& job, int64_t step) {
  v1::CheckpointRef ref;
  ref.set_job(job);
  ref.set_step(step);
  return ref;
}

absl::StatusOr<v1::CheckpointInfo> GetCheckpoint(const Cluster& c, const std::string& job,
                                                 int64_t step) {
  v1::CheckpointInfo info;
  TESSEL_RETURN_IF_ERROR(
      c.fleet().CallWithPrefix(c.AnyShard(), &v1::ShardServer::Stub::GetCheckpoint,
                               CheckpointRef(job, step), &info, "GetCheckpoint"));
  return info;
}

}  // namespace tessel::ctl
