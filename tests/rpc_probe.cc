// rpc_probe: calls one tessel.v1.ShardServer RPC on one shard server and
// prints its status, for tests that check which credential a server refuses
// for RPCs tesselctl does not make (ReadState, WriteState, SetEpoch,
// GetFrameKey).
//
// Usage:
//   rpc_probe --address=HOST:PORT --rpc=ReadState --job=J [--step=S] [--token_file=F]
//             [--tls_ca=CA --tls_cert=CERT --tls_key=KEY]
// Prints "<CODE>: <message>" and exits 0 for OK, 5 for UNAUTHENTICATED or
// PERMISSION_DENIED, 1 for any other status, 2 for a usage error.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/auth.h"
#include "rpc/grpc_util.h"
#include "rpc/tls.h"
#include "rpc/tls_flags.h"
#include "rpc/token_flag.h"

ABSL_FLAG(std::string, address, "", "host:port of the shard server's gRPC service");
ABSL_FLAG(std::string, rpc, "ReadState",
          "ReadState, WriteState, SetEpoch, GetStats or GetFrameKey");
ABSL_FLAG(std::string, job, "", "the job the RPC names");
ABSL_FLAG(int64_t, step, 0, "WriteState: the step it writes (a chunk of nothing, no commit)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // --tls_* and --token_file: the flags every Tessel binary shares.
  auto credentials = tessel::LoadClientCredentials(tessel::TlsOptionsFromFlags());
  if (!credentials.ok()) {
    std::cerr << "rpc_probe: " << credentials.status() << "\n";
    return 2;
  }
  absl::StatusOr<std::string> token = tessel::TokenFromFlag();
  if (!token.ok()) {
    std::cerr << "rpc_probe: " << token.status() << "\n";
    return 2;
  }
  auto stub = tessel::v1::ShardServer::NewStub(
      tessel::MakeChannel(absl::GetFlag(FLAGS_address), *credentials));
  grpc::ClientContext ctx;
  tessel::SetDeadline(&ctx, absl::Seconds(10));
  tessel::AddToken(&ctx, *token);
  const std::string rpc = absl::GetFlag(FLAGS_rpc);
  const std::string job = absl::GetFlag(FLAGS_job);
  grpc::Status s;
  if (rpc == "ReadState") {
    tessel::v1::ReadStateRequest req;
    req.set_job(job);
    req.set_count(1);
    tessel::v1::ShardState resp;
    s = stub->ReadState(&ctx, req, &resp);
  } else if (rpc == "WriteState") {
    tessel::v1::WriteStateRequest req;
    req.set_job(job);
    req.set_step(absl::GetFlag(FLAGS_step));
    tessel::v1::WriteStateResponse resp;
    s = stub->WriteState(&ctx, req, &resp);
  } else if (rpc == "SetEpoch") {
    tessel::v1::SetEpochRequest req;
    req.set_job(job);
    tessel::v1::SetEpochResponse resp;
    s = stub->SetEpoch(&ctx, req, &resp);
  } else if (rpc == "GetStats") {
    tessel::v1::JobRef req;
    req.set_job(job);
    tessel::v1::ShardStats resp;
    s = stub->GetStats(&ctx, req, &resp);
  } else if (rpc == "GetFrameKey") {
    tessel::v1::FrameKeyRequest req;
    req.set_job(job);
    tessel::v1::FrameKeyResponse resp;
    s = stub->GetFrameKey(&ctx, req, &resp);
  } else {
    std::cerr << "rpc_probe: --rpc must be ReadState, WriteState, SetEpoch, GetStats or "
                 "GetFrameKey\n";
    return 2;
  }
  std::cout << tessel::FromGrpc(s, rpc) << "\n";
  if (s.ok()) return 0;
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    return 5;
  }
  return 1;
}
