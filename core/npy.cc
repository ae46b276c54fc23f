#include "core/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "core/npy.cc reads and writes '<f4' by copying host floats");

namespace tessel {
namespace {

constexpr absl::string_view kMagic("\x93NUMPY", 6);
constexpr size_t kPreambleLen = 10;  // magic, major, minor, uint16 LE header length
constexpr size_t kArrayAlign = 64;   // numpy's ARRAY_ALIGN
// numpy >= 1.24 pads the header so the shape can grow in place: 21 spaces
// minus the digits of the growth axis (GROWTH_AXIS_MAX_DIGITS).
constexpr size_t kGrowthAxisMaxDigits = 21;
constexpr absl::string_view kExpected =
    "expected NumPy format 1.0 with {'descr': '<f4', 'fortran_order': False, 'shape': (N,)}";

// ---------------------------------------------------------------------------
// The header: a Python dict literal. Only the literal forms numpy writes are
// understood: strings, True/False, integers and tuples or lists of integers.

struct Literal {
  enum class Type { kString, kBool, kInt, kTuple, kList };
  Type type = Type::kString;
  std::string str;            // kString
  bool boolean = false;       // kBool
  std::vector<int64_t> ints;  // kInt (one), kTuple, kList
  std::string source;         // the literal as written, for messages
};

class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  // Parses `{key: value, ...}` followed only by whitespace. On error returns
  // InvalidArgument with a message that does not name the file.
  absl::Status Parse(std::map<std::string, Literal>* dict) {
    SkipSpace();
    if (!Consume('{')) return Error("the header does not start with '{'");
    SkipSpace();
    while (!Consume('}')) {
      std::string key;
      TESSEL_RETURN_IF_ERROR(ParseString(&key));
      SkipSpace();
      if (!Consume(':')) return Error("expected ':' after a key");
      SkipSpace();
      Literal value;
      TESSEL_RETURN_IF_ERROR(ParseValue(&value));
      if (!dict->emplace(key, std::move(value)).second) {
        return Error(absl::StrCat("duplicate key '", key, "'"));
      }
      SkipSpace();
      if (Consume(',')) {
        SkipSpace();
      } else if (Peek() != '}') {
        return Error("expected ',' or '}' after a value");
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the closing '}'");
    return absl::OkStatus();
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool Consume(char c) {
    if (Peek() != c || pos_ >= text_.size()) return false;
    ++pos_;
    return true;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && std::strchr(" \t\n\r\f\v", text_[pos_]) != nullptr) ++pos_;
  }
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed header dict at byte ", pos_, " of the header: ", what));
  }

  absl::Status ParseString(std::string* out) {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a quoted string");
    ++pos_;
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return Error("unterminated string");
    const absl::string_view body = text_.substr(pos_, end - pos_);
    if (body.find('\\') != absl::string_view::npos) {
      return Error("escape sequences in strings are not supported");
    }
    *out = std::string(body);
    pos_ = end + 1;
    return absl::OkStatus();
  }

  absl::Status ParseInt(int64_t* out) {
    const bool negative = Consume('-');
    if (!(Peek() >= '0' && Peek() <= '9')) return Error("expected an integer");
    uint64_t v = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      const uint64_t digit = static_cast<uint64_t>(Peek() - '0');
      // Checked before the multiply, so no value wraps past the limit.
      if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10) {
        return Error("integer too large");
      }
      v = v * 10 + digit;
      ++pos_;
    }
    *out = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
    return absl::OkStatus();
  }

  absl::Status ParseValue(Literal* out) {
    const size_t start = pos_;
    const char c = Peek();
    absl::Status status = absl::OkStatus();
    if (c == '\'' || c == '"') {
      out->type = Literal::Type::kString;
      status = ParseString(&out->str);
    } else if (text_.substr(pos_, 4) == "True") {
      out->type = Literal::Type::kBool;
      out->boolean = true;
      pos_ += 4;
    } else if (text_.substr(pos_, 5) == "False") {
      out->type = Literal::Type::kBool;
      pos_ += 5;
    } else if (c == '(' || c == '[') {
      status = ParseSequence(out);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      out->type = Literal::Type::kInt;
      out->ints.resize(1);
      status = ParseInt(&out->ints[0]);
    } else {
      return Error("expected a string, True, False, an integer or a tuple");
    }
    out->source = std::string(text_.substr(start, pos_ - start));
    return status;
  }

  // `(a, b)`, `(a,)`, `()`, `[a, b]`. Python makes `(a)` an int, not a tuple.
  absl::Status ParseSequence(Literal* out) {
    const char close = Peek() == '(' ? ')' : ']';
    out->type = close == ')' ? Literal::Type::kTuple : Literal::Type::kList;
    ++pos_;
    SkipSpace();
    bool saw_comma = false;
    while (!Consume(close)) {
      int64_t v;
      TESSEL_RETURN_IF_ERROR(ParseInt(&v));
      out->ints.push_back(v);
      SkipSpace();
      if (Consume(',')) {
        saw_comma = true;
        SkipSpace();
      } else if (Peek() != close) {
        return Error(absl::StrCat("expected ',' or '", std::string(1, close), "' in a sequence"));
      }
    }
    if (out->type == Literal::Type::kTuple && out->ints.size() == 1 && !saw_comma) {
      out->type = Literal::Type::kInt;  // `(37)` is just 37 in Python
    }
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------
// File helpers.

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }
  // Closes now, reporting the error close(2) returns (it can carry a
  // delayed write error).
  int Close() {
    const int rc = close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Reads exactly `len` bytes at `offset`; returns the number read (less only at
// end of file) or -1 with errno set.
ssize_t PreadFully(int fd, void* buf, size_t len, off_t offset) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = pread(fd, static_cast<char*>(buf) + done, len - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

bool WriteFully(int fd, const void* buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = write(fd, static_cast<const char*>(buf) + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string Printable(absl::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  if (dims.size() == 1) return absl::StrCat("(", dims[0], ",)");
  return absl::StrCat("(", absl::StrJoin(dims, ", "), ")");
}

// Checks the parsed header dict; returns the element count.
absl::StatusOr<size_t> CheckHeader(const std::map<std::string, Literal>& dict) {
  for (const auto& [key, value] : dict) {
    if (key != "descr" && key != "fortran_order" && key != "shape") {
      return absl::InvalidArgumentError(absl::StrCat("unexpected header key '", key, "'"));
    }
  }
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (dict.count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("the header has no '", key, "' key"));
    }
  }
  const Literal& descr = dict.at("descr");
  if (descr.type != Literal::Type::kString) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported dtype ", descr.source, " (structured or non-string descr); expected '<f4'"));
  }
  if (descr.str != "<f4") {
    std::string hint;
    if (descr.str == ">f4") hint = " (this file is big-endian)";
    if (descr.str == "<f8" || descr.str == "<f2") hint = " (convert with arr.astype('<f4'))";
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported dtype '", descr.str, "'; expected '<f4' (little-endian float32)", hint));
  }
  const Literal& fortran = dict.at("fortran_order");
  if (fortran.type != Literal::Type::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("fortran_order is ", fortran.source, "; expected False"));
  }
  if (fortran.boolean) {
    return absl::InvalidArgumentError("fortran_order is True; expected False (C order)");
  }
  const Literal& shape = dict.at("shape");
  if (shape.type != Literal::Type::kTuple) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", shape.source, " is not a tuple; expected a 1-D shape (N,)"));
  }
  if (shape.ints.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape.ints), " is ",
                                                   shape.ints.size(),
                                                   "-D; expected a 1-D shape (N,)"));
  }
  if (shape.ints[0] < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeString(shape.ints), " has a negative dimension"));
  }
  return static_cast<size_t>(shape.ints[0]);
}

}  // namespace

std::string NpyHeaderF32(absl::Span<const int64_t> shape) { return NpyHeader("<f4", shape); }

std::string NpyHeader(absl::string_view descr, absl::Span<const int64_t> shape) {
  std::string dict =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ",
                   ShapeString(std::vector<int64_t>(shape.begin(), shape.end())), ", }");
  // numpy >= 1.24 leaves room for the first (growth) axis to grow in place.
  if (!shape.empty()) {
    const size_t digits = absl::StrCat(shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  // numpy: padlen = ALIGN - ((MAGIC_LEN + 2 + hlen) % ALIGN), hlen counting the
  // final '\n'; an already aligned header still gets a full block of spaces.
  const size_t hlen = dict.size() + 1;
  const size_t padlen = kArrayAlign - ((kPreambleLen + hlen) % kArrayAlign);
  const size_t header_len = hlen + padlen;
  std::string out(kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header_len & 0xff));
  out.push_back(static_cast<char>(header_len >> 8));
  out += dict;
  out.append(padlen, ' ');
  out.push_back('\n');
  return out;
}

absl::StatusOr<std::vector<float>> ParseNpyF32(absl::string_view bytes,
                                               const std::string& name_for_errors) {
  auto fail = [&name_for_errors](absl::StatusCode code, absl::string_view what) {
    return absl::Status(code, absl::StrCat("cannot read .npy file ", name_for_errors, ": ", what));
  };
  auto invalid = [&](absl::string_view what) {
    return fail(absl::StatusCode::kInvalidArgument, absl::StrCat(what, "; ", kExpected));
  };
  auto data_loss = [&](absl::string_view what) { return fail(absl::StatusCode::kDataLoss, what); };

  const size_t file_size = bytes.size();
  const absl::string_view pre = bytes.substr(0, kPreambleLen);
  if (pre.empty()) return data_loss("the file is empty; a .npy file has at least 10 bytes");
  if (pre.substr(0, kMagic.size()) != kMagic.substr(0, pre.size())) {
    return invalid(absl::StrCat("not a .npy file: it starts with \"",
                                Printable(pre.substr(0, kMagic.size())),
                                "\" instead of the magic \"\\x93NUMPY\""));
  }
  if (pre.size() < kPreambleLen) {
    return data_loss(
        absl::StrCat("the file is ", pre.size(), " bytes, shorter than the 10-byte .npy preamble"));
  }
  const int major = static_cast<unsigned char>(pre[6]);
  const int minor = static_cast<unsigned char>(pre[7]);
  if (major != 1 || minor != 0) {
    return invalid(absl::StrCat("format version ", major, ".", minor, " is not supported",
                                major == 2 || major == 3
                                    ? " (numpy uses it only for headers over 64 KiB or non-"
                                      "latin1 field names)"
                                    : ""));
  }
  const size_t header_len = static_cast<unsigned char>(pre[8]) |
                            (static_cast<size_t>(static_cast<unsigned char>(pre[9])) << 8);
  const size_t data_offset = kPreambleLen + header_len;
  if (data_offset > file_size) {
    return data_loss(absl::StrCat("the header length field says ", header_len, " bytes, but only ",
                                  file_size - kPreambleLen, " bytes follow the preamble"));
  }
  const absl::string_view header = bytes.substr(kPreambleLen, header_len);
  std::map<std::string, Literal> dict;
  if (absl::Status s = HeaderParser(header).Parse(&dict); !s.ok()) {
    return invalid(absl::StrCat(s.message(), " (header: \"", Printable(header), "\")"));
  }
  absl::StatusOr<size_t> count = CheckHeader(dict);
  if (!count.ok()) return invalid(count.status().message());

  const size_t n = *count;
  const size_t data_bytes = file_size - data_offset;
  if (n > data_bytes / sizeof(float)) {
    return data_loss(absl::StrCat("truncated: shape (", n, ",) needs ", n,
                                  " float32 values (4 bytes each) after the ", data_offset,
                                  "-byte header, but only ", data_bytes, " bytes follow it"));
  }
  if (data_bytes != n * sizeof(float)) {
    return data_loss(absl::StrCat(data_bytes - n * sizeof(float),
                                  " unexpected trailing bytes after the ", n,
                                  " float32 values of shape (", n, ",)"));
  }
  std::vector<float> data(n);
  if (data_bytes > 0) std::memcpy(data.data(), bytes.data() + data_offset, data_bytes);
  return data;
}

absl::StatusOr<std::vector<float>> ReadNpyF32(const std::string& path) {
  auto fail = [&path](absl::StatusCode code, absl::string_view what) {
    return absl::Status(code, absl::StrCat("cannot read .npy file ", path, ": ", what));
  };

  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    return fail(absl::ErrnoToStatusCode(err), absl::StrCat("open: ", std::strerror(err)));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    const int err = errno;
    return fail(absl::ErrnoToStatusCode(err), absl::StrCat("fstat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(absl::StatusCode::kInvalidArgument,
                absl::StrCat("not a regular file; ", kExpected));
  }
  // The whole file, as fstat sized it: a file that grows meanwhile is read as
  // it was; one that shrinks is judged (truncated) by what is left.
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  const ssize_t got = PreadFully(fd.get(), bytes.data(), bytes.size(), 0);
  if (got < 0) {
    const int err = errno;
    return fail(absl::ErrnoToStatusCode(err), absl::StrCat("read: ", std::strerror(err)));
  }
  bytes.resize(static_cast<size_t>(got));
  return ParseNpyF32(bytes, path);
}

absl::Status WriteNpyF32(const std::string& path, absl::Span<const float> data) {
  const std::string tmp = path + ".tmp";
  auto fail = [&path](absl::string_view op, int err) {
    return absl::ErrnoToStatus(err, absl::StrCat("cannot write .npy file ", path, ": ", op));
  };

  Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return fail(absl::StrCat("open ", tmp), errno);
  const std::string header = NpyHeaderF32({static_cast<int64_t>(data.size())});
  bool ok = WriteFully(fd.get(), header.data(), header.size()) &&
            WriteFully(fd.get(), data.data(), data.size() * sizeof(float));
  const char* op = "write";
  if (ok && fsync(fd.get()) != 0) {
    ok = false;
    op = "fsync";
  }
  if (ok && fd.Close() != 0) {
    ok = false;
    op = "close";
  }
  if (ok && rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    op = "rename";
  }
  if (!ok) {
    const int err = errno;
    unlink(tmp.c_str());
    return fail(absl::StrCat(op, " ", tmp), err);
  }
  // Make the rename itself durable.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  Fd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0 || fsync(dir_fd.get()) != 0) {
    return fail(absl::StrCat("fsync directory ", dir), errno);
  }
  return absl::OkStatus();
}

}  // namespace tessel
