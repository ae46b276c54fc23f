#include "runtime/spin_budget.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/log.h"

namespace tessel {

namespace {

// Cores this process may run on: its CPU affinity, capped by a cgroup v2
// quota ("QUOTA PERIOD" in cpu.max; "max" is none), rounded up.
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cores <= 0) cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream in("/sys/fs/cgroup/cpu.max");
  std::string quota, period;
  if (in >> quota >> period && quota != "max") {
    int64_t q = 0, p = 0;
    if (absl::SimpleAtoi(quota, &q) && absl::SimpleAtoi(period, &p) && q > 0 && p > 0) {
      cores = std::min<int64_t>(cores, (q + p - 1) / p);
    }
  }
  return std::max(1, cores);
}

}  // namespace

SpinBudget::SpinBudget(std::string dir) : dir_(std::move(dir)) {}

SpinBudget::~SpinBudget() {
  bool released = false;
  {
    absl::MutexLock lock(&mu_);
    if (fd_ >= 0) {
      unlink(absl::StrCat(dir_, "/", getpid()).c_str());
      close(fd_);
      released = true;
    }
  }
  if (uint64_t* g = generation_.load(std::memory_order_acquire)) {
    if (released) __atomic_fetch_add(g, 1, __ATOMIC_RELEASE);
    munmap(g, 8);
  }
}

SpinBudget& SpinBudget::Host() {
  static SpinBudget* host = [] {
    const char* dir = std::getenv("TESSEL_SPIN_DIR");
    return new SpinBudget(dir != nullptr && *dir != '\0' ? dir : "/dev/shm/tessel-spin");
  }();
  return *host;
}

SpinBudget::Claim::~Claim() { budget_->Add(-threads_); }

std::unique_ptr<SpinBudget::Claim> SpinBudget::Take(int threads) {
  Add(threads);
  return std::unique_ptr<Claim>(new Claim(this, threads));
}

void SpinBudget::Add(int delta) {
  {
    absl::MutexLock lock(&mu_);
    mine_ += delta;
    WriteLocked();
  }
  read_at_ns_.store(0, std::memory_order_relaxed);  // read again at the next Fits()
  // After the file is written (and locked): every other process's next
  // Fits() reads the directory again and counts it.
  if (uint64_t* g = Generation()) __atomic_fetch_add(g, 1, __ATOMIC_RELEASE);
}

uint64_t* SpinBudget::Generation() {
  if (uint64_t* g = generation_.load(std::memory_order_acquire)) return g;
  // Where it cannot be mapped, every later call (each idle moment of a
  // polling thread) returns here without the lock.
  if (generation_tried_.load(std::memory_order_acquire)) return nullptr;
  absl::MutexLock lock(&generation_mu_);
  if (generation_tried_.load(std::memory_order_relaxed)) {
    return generation_.load(std::memory_order_relaxed);
  }
  uint64_t* mapped = MapGeneration();
  generation_.store(mapped, std::memory_order_release);
  generation_tried_.store(true, std::memory_order_release);
  return mapped;
}

uint64_t* SpinBudget::MapGeneration() const {
  mkdir(dir_.c_str(), 01777);
  const int fd =
      open(absl::StrCat(dir_, "/generation").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return nullptr;
  fchmod(fd, 0666);  // whoever created it: every user's processes bump it
  // Growing to 8 bytes is idempotent; racing creators write nothing else.
  struct stat st {};
  if (fstat(fd, &st) != 0 || (st.st_size < 8 && ftruncate(fd, 8) != 0)) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<uint64_t*>(p);
}

uint64_t SpinBudget::LoadGeneration() {
  uint64_t* g = Generation();
  return g == nullptr ? 0 : __atomic_load_n(g, __ATOMIC_ACQUIRE);
}

void SpinBudget::WriteLocked() {
  const std::string path = absl::StrCat(dir_, "/", getpid());
  if (fd_ < 0 && mine_ > 0) {
    mkdir(dir_.c_str(), 01777);  // every user's processes share it (sticky, like /tmp)
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0 || flock(fd_, LOCK_SH) != 0) {
      if (!warned_) {
        TESSEL_LOG(WARNING) << "cannot record this process's polling threads in " << dir_ << " ("
                            << std::strerror(errno)
                            << "): other processes on this host will not count them";
        warned_ = true;
      }
      if (fd_ >= 0) close(fd_);
      fd_ = -1;
      return;
    }
  }
  if (fd_ < 0) return;
  if (mine_ <= 0) {  // nothing claimed: no file
    unlink(path.c_str());
    close(fd_);
    fd_ = -1;
    return;
  }
  // Fixed width, one write: a reader never sees half a number.
  const std::string text = absl::StrFormat("%10d\n", mine_);
  const ssize_t unused = pwrite(fd_, text.data(), text.size(), 0);  // tmpfs: whole or nothing
  (void)unused;
}

SpinBudget::Count SpinBudget::Read() {
  Count c;
  c.cores = UsableCores();
  int mine = 0;
  bool recorded = false;
  {
    absl::MutexLock lock(&mu_);
    mine = mine_;
    recorded = fd_ >= 0;
  }
  if (!recorded) c.threads += mine;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return c;
  while (dirent* e = readdir(d)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    const std::string path = absl::StrCat(dir_, "/", e->d_name);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    // The owner holds a shared lock while it lives (this process's own
    // file too: flock belongs to the open file, not the process).
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // Nobody holds it: its process is gone, or has just created it and
      // not locked it yet (then its pid still answers, in this pid
      // namespace). Only the first kind is removed; neither is counted.
      if (kill(pid, 0) != 0 && errno == ESRCH) unlink(path.c_str());
      close(fd);
      continue;
    }
    char buf[32] = {};
    const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    int threads = 0;
    if (n > 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)), &threads)) {
      c.threads += std::max(0, threads);
    }
  }
  closedir(d);
  return c;
}

bool SpinBudget::Fits() {
  // A reading (~0.1 ms with 40 processes on the host) at most every 50 ms
  // after a claim or release anywhere, and every second regardless.
  constexpr int64_t kMovedNs = 50'000'000, kEveryNs = 1'000'000'000;
  const int64_t now = absl::GetCurrentTimeNanos();
  const uint64_t generation = LoadGeneration();
  const int64_t age = now - read_at_ns_.load(std::memory_order_relaxed);
  const bool moved = generation != read_generation_.load(std::memory_order_relaxed);
  if (age < (moved ? kMovedNs : kEveryNs)) return fits_.load(std::memory_order_relaxed);
  if (!read_mu_.TryLock()) return fits_.load(std::memory_order_relaxed);  // another thread reads
  const Count c = Read();  // sees every claim made before `generation`
  fits_.store(c.threads <= c.cores, std::memory_order_relaxed);
  read_generation_.store(generation, std::memory_order_relaxed);
  read_at_ns_.store(now, std::memory_order_relaxed);
  read_mu_.Unlock();
  return c.threads <= c.cores;
}

SpinPolicy::SpinPolicy(SpinMode mode, absl::Duration spin, int threads, std::string who,
                       SpinBudget* budget)
    : mode_(spin > absl::ZeroDuration() ? mode : SpinMode::kEvent),
      spin_(spin),
      who_(std::move(who)),
      budget_(budget) {
  if (mode_ != SpinMode::kEvent && threads > 0) claim_ = budget_->Take(threads);
}

absl::Duration SpinPolicy::Window() {
  switch (mode_) {
    case SpinMode::kSpin:
      return spin_;
    case SpinMode::kEvent:
      return absl::ZeroDuration();
    case SpinMode::kAuto:
      break;
  }
  const bool fits = budget_->Fits();
  const int now = fits ? 1 : 0;
  if (last_.exchange(now, std::memory_order_relaxed) != now) {
    TESSEL_LOG(INFO) << who_ << ": " << Describe();  // the switch, and why
  }
  return fits ? spin_ : Crowded();
}

std::string SpinPolicy::Describe() {
  switch (mode_) {
    case SpinMode::kSpin:
      return absl::StrCat("spin ", absl::FormatDuration(spin_));
    case SpinMode::kEvent:
      return "event-driven";
    case SpinMode::kAuto:
      break;
  }
  const SpinBudget::Count c = budget_->Read();
  return c.threads <= c.cores
             ? absl::StrCat("auto: spin ", absl::FormatDuration(spin_), " (", c.threads,
                            " polling threads <= ", c.cores, " cores)")
             : absl::StrCat("auto: poll ", absl::FormatDuration(Crowded()), ", then sleep (",
                            c.threads, " polling threads > ", c.cores, " cores)");
}

}  // namespace tessel
