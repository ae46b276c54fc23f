#include "rpc/token_files.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "rpc/secret_file.h"

namespace tessel {

bool ConstantTimeEquals(absl::string_view given, absl::string_view secret) {
  if (secret.empty()) return false;
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ secret[i % secret.size()]);
  }
  return diff == 0;
}

namespace {

// The non-blank, non-comment lines of a token file, split on whitespace.
absl::StatusOr<std::vector<std::vector<std::string>>> TokenLines(absl::string_view flag,
                                                                 const std::string& path) {
  TESSEL_ASSIGN_OR_RETURN(const std::string content, ReadSecretFile(flag, path));
  std::vector<std::vector<std::string>> lines;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') continue;
    lines.push_back(absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty()));
  }
  return lines;
}

// How to write a good token file (owner-only, rpc/secret_file.h).
std::string WriteOneHint(const std::string& path) {
  return absl::StrCat("`(umask 077; head -c 24 /dev/urandom | base64 > ", path, ")`");
}

absl::Status CheckTokenLength(absl::string_view flag, const std::string& path,
                              absl::string_view token) {
  if (token.size() >= 16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the token in ", flag, " '", path,
                                                 "' must be at least 16 characters, e.g. ",
                                                 WriteOneHint(path)));
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path) {
  TESSEL_ASSIGN_OR_RETURN(const std::vector<std::vector<std::string>> lines,
                          TokenLines(flag, path));
  if (lines.empty()) return CheckTokenLength(flag, path, "");  // "at least 16 characters"
  const std::string& token = lines.front().front();
  TESSEL_RETURN_IF_ERROR(CheckTokenLength(flag, path, token));
  return token;
}

absl::StatusOr<std::vector<RoleToken>> ReadRoleTokenFile(absl::string_view flag,
                                                         const std::string& path, Role role) {
  TESSEL_ASSIGN_OR_RETURN(const std::vector<std::vector<std::string>> lines,
                          TokenLines(flag, path));
  if (lines.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' holds no token; write one, e.g. ", WriteOneHint(path)));
  }
  std::vector<RoleToken> out;
  int n = 0;
  for (const std::vector<std::string>& fields : lines) {
    ++n;
    RoleToken t;
    t.role = role;
    t.token = fields[0];
    TESSEL_RETURN_IF_ERROR(CheckTokenLength(flag, path, t.token));
    if (fields.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " '", path, "' token ", n, ": expected 'TOKEN' or 'TOKEN JOB[,JOB...]', got ",
          fields.size(), " fields"));
    }
    if (fields.size() == 2) {
      if (role != Role::kWorker) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " '", path, "' token ", n, ": only worker tokens have a job scope"));
      }
      t.jobs = absl::StrSplit(fields[1], ',', absl::SkipEmpty());
    }
    for (const RoleToken& seen : out) {
      if (seen.token == t.token) {
        return absl::InvalidArgumentError(absl::StrCat(
            flag, " '", path, "' lists one token twice (tokens ", n,
            " and an earlier one); give each scope its own token, or list the jobs on one line "
            "(TOKEN job1,job2)"));
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace tessel
