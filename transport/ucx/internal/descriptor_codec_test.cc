#include "transport/ucx/internal/descriptor_codec.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace ucx_internal {
namespace {

DescriptorFields Fields() {
  DescriptorFields f;
  f.lease = 7;
  f.region = 3;
  f.remote_base = 0x7f0012340000;
  f.region_bytes = 4 << 20;
  f.offset = 4096;
  f.bytes = 1 << 20;
  return f;
}

TEST(DescriptorCodecTest, RoundTrips) {
  const std::vector<uint8_t> header = {1, 2, 3, 4, 5};
  const std::vector<uint8_t> rkey = {9, 8, 7};
  const std::vector<uint8_t> wire = EncodeDescriptor(Fields(), header, rkey);
  ASSERT_EQ(wire.size(), kDescriptorFixedBytes + header.size() + rkey.size());
  absl::StatusOr<DescriptorView> d = DecodeDescriptor(wire);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->fields.lease, 7u);
  EXPECT_EQ(d->fields.region, 3u);
  EXPECT_EQ(d->fields.remote_base, 0x7f0012340000u);
  EXPECT_EQ(d->fields.region_bytes, 4u << 20);
  EXPECT_EQ(d->fields.offset, 4096u);
  EXPECT_EQ(d->fields.bytes, 1u << 20);
  EXPECT_EQ(std::vector<uint8_t>(d->header.begin(), d->header.end()), header);
  EXPECT_EQ(std::vector<uint8_t>(d->rkey.begin(), d->rkey.end()), rkey);
  // Views point into the decoded buffer.
  EXPECT_EQ(d->header.data(), wire.data() + kDescriptorFixedBytes);
}

TEST(DescriptorCodecTest, TheLayoutIsLittleEndianAndFixed) {
  // Six u64, two u32, then header and key (descriptor_codec.h).
  const std::vector<uint8_t> wire = EncodeDescriptor(Fields(), {0xaa}, {0xbb, 0xcc});
  uint64_t lease = 0, region_bytes = 0, offset = 0;
  uint32_t header_len = 0, rkey_len = 0;
  std::memcpy(&lease, wire.data(), 8);
  std::memcpy(&region_bytes, wire.data() + 24, 8);
  std::memcpy(&offset, wire.data() + 32, 8);
  std::memcpy(&header_len, wire.data() + 48, 4);
  std::memcpy(&rkey_len, wire.data() + 52, 4);
  EXPECT_EQ(lease, 7u);
  EXPECT_EQ(region_bytes, 4u << 20);
  EXPECT_EQ(offset, 4096u);
  EXPECT_EQ(header_len, 1u);
  EXPECT_EQ(rkey_len, 2u);
  EXPECT_EQ(wire[56], 0xaa);
  EXPECT_EQ(wire[57], 0xbb);
}

TEST(DescriptorCodecTest, AnEmptyHeaderIsFine) {
  absl::StatusOr<DescriptorView> d = DecodeDescriptor(EncodeDescriptor(Fields(), {}, {1}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->header.empty());
  EXPECT_EQ(d->rkey.size(), 1u);
}

TEST(DescriptorCodecTest, MalformedDescriptorsAreRefusedWithAReason) {
  const std::vector<uint8_t> good = EncodeDescriptor(Fields(), {1, 2}, {3, 4});
  auto refused = [](const std::vector<uint8_t>& wire, const char* why) {
    absl::StatusOr<DescriptorView> d = DecodeDescriptor(wire);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_FALSE(d.status().message().empty()) << why;
  };
  refused({}, "empty");
  refused(std::vector<uint8_t>(good.begin(), good.begin() + 55), "shorter than the fixed part");
  refused(std::vector<uint8_t>(good.begin(), good.end() - 1), "truncated key");
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  refused(longer, "trailing byte");
  std::vector<uint8_t> huge = good;
  huge[51] = 0xff;  // header_len's top byte: far past the input
  refused(huge, "header length past the end");
  refused(EncodeDescriptor(Fields(), {1, 2}, {}), "no remote key");
  DescriptorFields wrap = Fields();
  wrap.offset = ~uint64_t{0} - 1;
  wrap.bytes = 4;
  refused(EncodeDescriptor(wrap, {}, {1}), "offset + bytes overflows");
}

// Issue 42: a descriptor names a payload inside the sender's region, never
// past it: ucp_rkey_ptr checks no bounds, so the receiver would otherwise
// read (and copy into its buffers) whatever lies beyond the mapping.
TEST(DescriptorCodecTest, APayloadOutsideItsRegionIsRefused) {
  auto refused = [](const DescriptorFields& f, const char* why) {
    absl::StatusOr<DescriptorView> d = DecodeDescriptor(EncodeDescriptor(f, {}, {1}));
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << why;
  };
  DescriptorFields f = Fields();
  f.offset = f.region_bytes - f.bytes;  // ends exactly at the region's end: fine
  EXPECT_TRUE(DecodeDescriptor(EncodeDescriptor(f, {}, {1})).ok());
  f.offset += 1;
  refused(f, "one byte past the end");
  f = Fields();
  f.offset = f.region_bytes;
  f.bytes = 1;
  refused(f, "starts at the end");
  f = Fields();
  f.offset = 1 << 20;
  f.bytes = ~uint64_t{0} - (1 << 19);  // offset + bytes wraps to inside the region
  refused(f, "size wraps around");
  f = Fields();
  f.region_bytes = 0;
  refused(f, "empty region");
}

TEST(DescriptorCodecTest, RandomBytesNeverCrash) {
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> wire(rng() % 80);
    for (uint8_t& b : wire) b = static_cast<uint8_t>(rng());
    if (wire.size() >= kDescriptorFixedBytes && i % 2 == 0) {  // plausible lengths half the time
      const uint32_t rest = static_cast<uint32_t>(wire.size() - kDescriptorFixedBytes);
      const uint32_t h = rest == 0 ? 0 : rng() % (rest + 1);
      const uint32_t k = rest - h;
      std::memcpy(wire.data() + 48, &h, 4);
      std::memcpy(wire.data() + 52, &k, 4);
    }
    absl::StatusOr<DescriptorView> d = DecodeDescriptor(wire);
    if (d.ok()) {
      EXPECT_EQ(EncodeDescriptor(d->fields, d->header, d->rkey), wire);
    } else {
      EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    }
    absl::StatusOr<Release> r = DecodeRelease(wire);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(DescriptorCodecTest, ReleaseRoundTripsAndIgnoresPadding) {
  for (ReleaseStatus s :
       {ReleaseStatus::kReadInPlace, ReleaseStatus::kResend, ReleaseStatus::kDropped}) {
    std::vector<uint8_t> wire = EncodeRelease({123456789012345, s});
    ASSERT_EQ(wire.size(), kReleaseBytes);
    wire[15] = 0x5a;  // padding: an older sender left it uninitialized
    absl::StatusOr<Release> r = DecodeRelease(wire);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->lease, 123456789012345u);
    EXPECT_EQ(r->status, s);
  }
}

TEST(DescriptorCodecTest, MalformedReleasesAreRefused) {
  std::vector<uint8_t> wire = EncodeRelease({1, ReleaseStatus::kResend});
  EXPECT_EQ(DecodeRelease(absl::MakeConstSpan(wire).subspan(0, 9)).status().code(),
            absl::StatusCode::kInvalidArgument);
  wire[8] = 3;
  absl::StatusOr<Release> r = DecodeRelease(wire);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("status 3"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
