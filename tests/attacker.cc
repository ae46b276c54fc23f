// An attacker for //tests:attack_test. By default (--mode=outsider) a
// process in no job that knows what anyone may read from a registry
// (members' UCX addresses, jobs' names and epochs) and sprays hostile
// data-path frames at one peer over UCX; --mode=member, tenant_setup and
// tenant are the attacks from inside (tests/attack_insider.h).
//
// Usage:
//   attacker --to=HEX_UCX_ADDRESS --job=NAME --epoch=E --kinds=push,pull,init,params,error,
//            oversized,undersized --step_range=FIRST:LAST --ranks=0,1 --shards=0,1 --buckets=4
//            [--bytes=N] [--ucx_tls=posix,sysv,self]
//            [--kinds=...,out_of_region,forged_release,hello_flood --third=HEX_UCX_ADDRESS]
//   attacker --mode=member --job=NAME --rank=R --world=W --servers=S --targets=FILE
//            --kinds=steal_key,other_rank,replay_push,replay_pull,forged_direction
//            --attack_at=K --registry=... --token_file=... [tessel-train's model flags]
//   attacker --mode=tenant_setup|tenant|tenant_stats --targets=FILE --victims=A.g1,A~sync1.e1
//            --mesh=A.mesh --own=A.g2 --token_file=...
// Every frame is sent twice: with the bare 64-byte header, and with a 16-byte
// tag of random bytes after it (a forger without the job's key). Frames:
//   push, init    a gradient / initial bucket of --bytes bytes of 0x7F
//                 (3.4e38 in every float lane: applied once, it would wreck
//                 the parameters)
//   pull          a PULL of the bucket (a forger asking for parameters)
//   params        a PARAMS of --bytes bytes of 0x7F toward a worker
//   error         an ERROR toward a worker, its text 1 KiB
//   oversized     a PARAMS whose payload is 3x what its header says (the
//                 memory-safety attack on a worker: the transport would copy
//                 the real length)
//   undersized    a PARAMS whose payload is a third of what its header says
// and, below the frames (tests/attack_transport.h; sent once each, --third
// naming the address HELLOs ask to dial): out_of_region, forged_release,
// hello_flood.
// Prints "sent N frames (F failed); kinds KIND=n ..." and exits 0 once every
// send completed (1 if the peer cannot be reached or a send failed).
#include <atomic>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/wire.h"
#include "tests/attack_frames.h"
#include "tests/attack_insider.h"
#include "tests/attack_transport.h"
#include "transport/ucx/ucx_flags.h"
#include "transport/ucx/ucx_transport.h"

// --ucx_tls, and tessel-train's --steps and model flags, are the linked
// libraries' (transport/ucx/ucx_flags.h, worker/train_flags.h).
ABSL_FLAG(std::string, mode, "outsider", "outsider, member, tenant_setup or tenant");
ABSL_FLAG(std::string, to, "", "hex UCX address of the peer (tesselctl members -o json)");
ABSL_FLAG(std::string, job, "", "job name (its id is JobId(name))");
ABSL_FLAG(int64_t, epoch, 0, "the job's epoch (tesselctl stats -o json)");
ABSL_FLAG(std::string, kinds, "push,pull,init", "frame kinds (see the file comment)");
ABSL_FLAG(std::string, step_range, "0:0", "FIRST:LAST steps");
ABSL_FLAG(std::string, ranks, "0", "ranks, comma-separated");
ABSL_FLAG(std::string, shards, "0", "shards, comma-separated");
ABSL_FLAG(int, buckets, 1, "buckets 0..N-1");
ABSL_FLAG(int64_t, bytes, 4096, "payload bytes of push/init/params frames");
ABSL_FLAG(std::string, third, "",
          "hex UCX address the hello_flood's HELLOs name besides the attacker's own");
ABSL_FLAG(int, rank, 0, "member: its rank");
ABSL_FLAG(int, world, 1, "member: the job's world size");
ABSL_FLAG(int, servers, 0, "member: shard servers (0 = every server in the pool)");
ABSL_FLAG(int64_t, attack_at, 5, "member: the step it attacks at");
ABSL_FLAG(std::string, targets, "", "member, tenant: the targets file (tests/attack_rpc.h)");
ABSL_FLAG(std::string, victims, "", "tenant: the victim's derived job names");
ABSL_FLAG(std::string, mesh, "", "tenant: the victim's mesh group");
ABSL_FLAG(std::string, own, "", "tenant: the derived name the attacker creates");

namespace {

std::vector<int> Ints(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v;
    if (absl::SimpleAtoi(s, &v)) out.push_back(v);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "outsider") {
    tessel::InsiderConfig c;
    c.job = absl::GetFlag(FLAGS_job);
    for (absl::string_view k : absl::StrSplit(absl::GetFlag(FLAGS_kinds), ',', absl::SkipEmpty())) {
      c.kinds.insert(std::string(k));
    }
    c.targets = absl::GetFlag(FLAGS_targets);
    c.buckets = absl::GetFlag(FLAGS_buckets);
    c.bytes = absl::GetFlag(FLAGS_bytes);
    c.rank = absl::GetFlag(FLAGS_rank);
    c.world = absl::GetFlag(FLAGS_world);
    c.servers = absl::GetFlag(FLAGS_servers);
    c.attack_at = absl::GetFlag(FLAGS_attack_at);
    c.victims = absl::StrSplit(absl::GetFlag(FLAGS_victims), ',', absl::SkipEmpty());
    c.mesh = absl::GetFlag(FLAGS_mesh);
    c.own = absl::GetFlag(FLAGS_own);
    c.epoch = absl::GetFlag(FLAGS_epoch) > 0 ? absl::GetFlag(FLAGS_epoch) : 1;
    if (mode == "member") return tessel::RunMember(c);
    if (mode == "tenant_setup") return tessel::RunTenantSetup(c);
    if (mode == "tenant") return tessel::RunTenant(c);
    if (mode == "tenant_stats") return tessel::RunTenantStats(c);
    std::cerr << "attacker: unknown --mode '" << mode << "'\n";
    return 1;
  }
  const std::vector<std::string> range = absl::StrSplit(absl::GetFlag(FLAGS_step_range), ':');
  int64_t first = 0, last = 0;
  if (absl::GetFlag(FLAGS_to).empty() || absl::GetFlag(FLAGS_job).empty() || range.size() != 2 ||
      !absl::SimpleAtoi(range[0], &first) || !absl::SimpleAtoi(range[1], &last) || last < first ||
      absl::GetFlag(FLAGS_bytes) < 0) {
    std::cerr << "attacker: give --to, --job, --step_range=FIRST:LAST (see the file comment)\n";
    return 1;
  }
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t job = tessel::JobId(absl::GetFlag(FLAGS_job));
  const int64_t bytes = absl::GetFlag(FLAGS_bytes);
  std::vector<tessel::AttackFrame> frames;
  std::set<std::string> transport_kinds;
  // Each frame twice: the bare header, and the header with a made-up tag.
  auto add = [&](absl::string_view kind, tessel::FrameHeader h, size_t payload) {
    const tessel::HeaderBytes enc = tessel::EncodeHeader(h);
    std::vector<uint8_t> tagged(enc.begin(), enc.end());
    for (int i = 0; i < 16; ++i) tagged.push_back(static_cast<uint8_t>(rng()));
    tessel::AddFrame(&frames, std::string(kind), enc, payload);
    tessel::AddFrame(&frames, std::string(kind), tagged, payload);
  };
  for (absl::string_view kind : absl::StrSplit(absl::GetFlag(FLAGS_kinds), ',')) {
    if (tessel::IsTransportKind(std::string(kind))) {
      transport_kinds.insert(std::string(kind));
      continue;
    }
    for (int64_t step = first; step <= last; ++step) {
      for (int rank : Ints(absl::GetFlag(FLAGS_ranks))) {
        for (int shard : Ints(absl::GetFlag(FLAGS_shards))) {
          for (int b = 0; b < absl::GetFlag(FLAGS_buckets); ++b) {
            const int64_t epoch = absl::GetFlag(FLAGS_epoch);
            auto header = [&](tessel::FrameType t) {
              return tessel::MakeHeader(t, job, epoch, step, rank, shard, b);
            };
            if (kind == "push" || kind == "init" || kind == "params") {
              tessel::FrameHeader h = header(kind == "push"   ? tessel::FrameType::kPush
                                             : kind == "init" ? tessel::FrameType::kInit
                                                              : tessel::FrameType::kParams);
              h.payload_bytes = static_cast<uint64_t>(bytes);
              add(kind, h, static_cast<size_t>(bytes));
            } else if (kind == "pull") {
              tessel::FrameHeader h = header(tessel::FrameType::kPull);
              h.bucket_count = 1;
              add(kind, h, 0);
            } else if (kind == "error") {
              tessel::FrameHeader h = header(tessel::FrameType::kError);
              h.code = 13;  // INTERNAL
              h.payload_bytes = 1024;
              add(kind, h, 1024);
            } else if (kind == "oversized" || kind == "undersized") {
              tessel::FrameHeader h = header(tessel::FrameType::kParams);
              h.payload_bytes = static_cast<uint64_t>(bytes);
              add(kind, h, static_cast<size_t>(kind == "oversized" ? 3 * bytes : bytes / 3));
            } else {
              std::cerr << "attacker: unknown kind '" << kind << "'\n";
              return 1;
            }
          }
        }
      }
    }
  }
  const std::string to = absl::HexStringToBytes(absl::GetFlag(FLAGS_to));
  tessel::SprayResult sent;
  if (!frames.empty()) {
    auto transport = tessel::UcxTransport::Create({.tls = absl::GetFlag(FLAGS_ucx_tls)});
    if (!transport.ok()) {
      std::cerr << "attacker: " << transport.status() << "\n";
      return 1;
    }
    std::atomic<int64_t> answers{0};
    (*transport)->SetHandler(tessel::CountingHandler(&answers));
    auto peer = (*transport)->Connect(to);
    if (!peer.ok()) {
      std::cerr << "attacker: " << peer.status() << "\n";
      return 1;
    }
    sent = tessel::Spray(**transport, *peer, frames);
    (*transport)->Shutdown();
  }
  // Below the frames: DESCRIPTOR, RELEASE and HELLO messages, carrying a
  // PUSH header of the job.
  std::map<std::string, int64_t> messages;
  absl::Status transport_attack = absl::OkStatus();
  if (!transport_kinds.empty()) {
    const tessel::HeaderBytes push = tessel::EncodeHeader(tessel::MakeHeader(
        tessel::FrameType::kPush, job, absl::GetFlag(FLAGS_epoch), first, 0, 0, 0));
    transport_attack = tessel::AttackTransport(
        to, absl::GetFlag(FLAGS_ucx_tls), transport_kinds, std::string(push.begin(), push.end()),
        absl::HexStringToBytes(absl::GetFlag(FLAGS_third)), &messages);
    if (!transport_attack.ok()) std::cerr << "attacker: " << transport_attack << "\n";
  }
  int64_t total = static_cast<int64_t>(sent.done);
  std::string kinds = tessel::KindCounts(frames);
  for (const auto& [kind, n] : messages) {
    total += n;
    absl::StrAppend(&kinds, kinds.empty() ? "" : " ", kind, "=", n);
  }
  std::cout << "sent " << total << " frames (" << sent.failed << " failed); kinds " << kinds
            << std::endl;
  return sent.done == frames.size() && sent.failed == 0 && transport_attack.ok() ? 0 : 1;
}
