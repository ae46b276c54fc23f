#include "rpc/certificate_grants.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tessel {
namespace {

constexpr absl::string_view kRolePrefix = "tessel:";
constexpr absl::string_view kWorkerCnPrefix = "worker:";

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};

// Every value of attribute `nid` in `name`, as UTF-8.
std::vector<std::string> NameEntries(X509_NAME* name, int nid) {
  std::vector<std::string> out;
  for (int i = X509_NAME_get_index_by_NID(name, nid, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(name, nid, i)) {
    ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
    unsigned char* utf8 = nullptr;
    const int n = ASN1_STRING_to_UTF8(&utf8, data);
    if (n >= 0 && utf8 != nullptr) out.emplace_back(reinterpret_cast<char*>(utf8), n);
    OPENSSL_free(utf8);
  }
  return out;
}

// The whole subject on one line, RFC 2253 ("CN=worker:mlp,O=tessel:worker").
std::string SubjectLine(X509_NAME* name) {
  std::unique_ptr<BIO, BioFree> out(BIO_new(BIO_s_mem()));
  if (out == nullptr || X509_NAME_print_ex(out.get(), name, 0, XN_FLAG_RFC2253) < 0) return "";
  char* data = nullptr;
  const long n = BIO_get_mem_data(out.get(), &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : "";
}

}  // namespace

std::vector<Grant> GrantsFromCertificate(absl::string_view pem) {
  std::vector<Grant> out;
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) return out;
  X509_NAME* subject = X509_get_subject_name(cert.get());
  const std::vector<std::string> cns = NameEntries(subject, NID_commonName);
  const std::vector<std::string> orgs = NameEntries(subject, NID_organizationName);
  const std::string cn = cns.empty() ? "" : cns.front();
  const std::string identity = absl::StrCat("certificate ", SubjectLine(subject));
  for (const std::string& o : orgs) {
    absl::string_view role = o;
    if (!absl::ConsumePrefix(&role, kRolePrefix)) continue;
    Grant g;
    if (role == "admin") {
      g.role = Role::kAdmin;
    } else if (role == "worker") {
      g.role = Role::kWorker;
      absl::string_view job = cn;
      if (absl::ConsumePrefix(&job, kWorkerCnPrefix) && !job.empty()) g.jobs.emplace_back(job);
    } else if (role == "server") {
      g.role = Role::kServer;
    } else if (role == "reader") {
      g.role = Role::kReader;
    } else {
      continue;
    }
    g.source = absl::StrCat("certificate CN=", cn, ", O=", o);
    g.identity = identity;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace tessel
