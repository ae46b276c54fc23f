#include "testing/local_cluster.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/grpc_util.h"
#include "rpc/registry_client.h"

namespace tessel {

LocalCluster::LocalCluster(ClusterOptions options)
    : options_(std::move(options)), processes_(options_.run_dir) {}

LocalCluster::~LocalCluster() { Stop(); }

absl::Status LocalCluster::Start() {
  TESSEL_ASSIGN_OR_RETURN(auto credentials, LoadServerCredentials(options_.tls));
  AuthOptions auth;
  if (!options_.insecure) {
    TESSEL_ASSIGN_OR_RETURN(LaunchCredentials made, MakeLaunchCredentials(options_.run_dir));
    credentials_ = std::make_unique<LaunchCredentials>(std::move(made));
    auth = credentials_->auth;
  }
  registry_ = std::make_unique<RegistryService>(options_.lease_ttl, std::move(auth));
  TESSEL_ASSIGN_OR_RETURN(registry_server_, StartGrpcServer("127.0.0.1:0", {registry_.get()},
                                                            &registry_address_, credentials));

  const std::string binary = FindBinary("server/tessel-server");
  for (int s = 0; s < options_.servers; ++s) {
    std::vector<std::string> argv = {
        binary,
        absl::StrCat("--registry=", registry_address_),
        absl::StrCat("--shard=", s),
        absl::StrCat("--pool=", options_.pool),
        absl::StrCat("--ucx_tls=", options_.ucx_tls),
        absl::StrCat("--lease_ttl_ms=", absl::ToInt64Milliseconds(options_.lease_ttl))};
    for (std::string& f : TlsFlags(options_.tls)) argv.push_back(std::move(f));
    if (credentials_ != nullptr) {
      for (std::string& f : credentials_->ServerFlags()) argv.push_back(std::move(f));
    } else {
      argv.push_back("--insecure");
    }
    argv.insert(argv.end(), options_.server_args.begin(), options_.server_args.end());
    TESSEL_RETURN_IF_ERROR(processes_.Start(absl::StrCat("server", s), argv));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  const int want = options_.servers;
  while (absl::Now() < deadline) {
    TESSEL_RETURN_IF_ERROR(processes_.CheckAlive());
    TESSEL_ASSIGN_OR_RETURN(auto view, registry_->registry().GetView(options_.pool));
    if (view.members_size() >= want) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("shard servers did not register within 60 s; logs in ", options_.run_dir));
}

absl::Status LocalCluster::RunWorkers(int workers, const std::vector<std::string>& args,
                                      absl::Duration timeout, const volatile int* stop_requested,
                                      bool show_rank0) {
  const std::string binary = FindBinary("tools/tessel-train");
  std::vector<std::string> names;
  for (int r = 0; r < workers; ++r) {
    std::vector<std::string> argv = {binary,
                                     absl::StrCat("--registry=", registry_address_),
                                     absl::StrCat("--rank=", r),
                                     absl::StrCat("--world=", workers),
                                     absl::StrCat("--servers=", options_.servers),
                                     absl::StrCat("--pool=", options_.pool)};
    for (std::string& f : TlsFlags(options_.tls)) argv.push_back(std::move(f));
    for (std::string& f : WorkerCredentialFlags()) argv.push_back(std::move(f));
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(absl::StrCat("--ucx_tls=", options_.ucx_tls));  // last one wins
    const std::string name = absl::StrCat("worker", r);
    TESSEL_RETURN_IF_ERROR(processes_.Start(name, argv, show_rank0 && r == 0));
    names.push_back(name);
  }
  return processes_.WaitAll(names, timeout, stop_requested);
}

std::vector<std::string> LocalCluster::WorkerCredentialFlags() const {
  if (credentials_ == nullptr) return {};
  return {absl::StrCat("--token_file=", credentials_->worker_token_file)};
}

std::string LocalCluster::WorkerToken() const {
  if (credentials_ == nullptr || credentials_->auth.worker_tokens.empty()) return "";
  return credentials_->auth.worker_tokens[0].token;
}

void LocalCluster::Stop() {
  processes_.StopAll();
  if (registry_ != nullptr) registry_->Stop();
  if (registry_server_ != nullptr) {
    registry_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
    registry_server_.reset();
  }
}

absl::StatusOr<std::vector<HttpPage>> LocalCluster::StatusPages() {
  if (registry_ == nullptr) {
    return absl::FailedPreconditionError("the local cluster's registry is not started");
  }
  if (status_page_ == nullptr) {
    TESSEL_ASSIGN_OR_RETURN(ClientCredentials credentials, LoadClientCredentials(options_.tls));
    status_page_ = std::make_unique<StatusPage>(registry_.get(), std::move(credentials));
    status_page_->SetAddress(registry_address_);
    const bool tls = options_.tls.enabled();
    status_page_->SetSecurity(credentials_ != nullptr
                                  ? (tls ? "mutual TLS, tokens" : "tokens")
                                  : (tls ? "mutual TLS, any certificate" : "insecure"));
  }
  return status_page_->Pages();
}

}  // namespace tessel
