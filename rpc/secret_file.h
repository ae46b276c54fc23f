// Secret files (bearer tokens, TLS private keys): read only when others
// cannot read them, as ssh and PostgreSQL refuse a private key that group or
// world may read. Every reader of a secret goes through ReadSecretFile.
//
// The rule (PostgreSQL's, so that Kubernetes Secrets mounted root-owned with
// group read under fsGroup keep working), on the file actually opened (links
// followed, as Secret volumes are links):
//   - owned by root: group may read, nothing more (mode & 037 == 0: 0640,
//     0440, 0600, 0400). This holds for a process running as root too: a
//     root-owned file is how Kubernetes and configuration management hand
//     secrets over, and its group is the administrator's choice.
//   - owned by the process's (effective) user, not root: owner only
//     (mode & 077 == 0: 0600, 0400).
//   - owned by another user: as root's (mode & 037 == 0), the files a
//     deployment user hands a service's group (libpq's rule for client keys).
// A refusal names the flag, the file, its mode and owner, and the fix
// (`chmod 600 FILE`). Files over kMaxSecretFileBytes are refused unread.
// Pure functions (file reads only), any thread.
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(std::string pem, ReadSecretFile("--tls_key", path));
#ifndef TESSEL_RPC_SECRET_FILE_H_
#define TESSEL_RPC_SECRET_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessel {

// A token file or a private key is far smaller; anything larger is not one.
inline constexpr int64_t kMaxSecretFileBytes = 1 << 20;

// The whole of the secret file `path`, or: NotFound when it cannot be opened,
// PermissionDenied when its mode breaks the rule above, InvalidArgument for a
// folder or a file over kMaxSecretFileBytes. `flag` names the flag in errors.
absl::StatusOr<std::string> ReadSecretFile(absl::string_view flag, const std::string& path);

// The rule on plain values: OK, or the PermissionDenied ReadSecretFile
// returns for a file of `owner` and `mode` read by a process of
// `process_uid`.
absl::Status CheckSecretFileMode(absl::string_view flag, const std::string& path, uid_t owner,
                                 mode_t mode, uid_t process_uid);

}  // namespace tessel

#endif  // TESSEL_RPC_SECRET_FILE_H_
