#include "gpu/internal/pinned_regions.h"

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tessel::gpu::internal {
namespace {

constexpr size_t kPage = 4096;

// A fake address: page-aligned base plus an offset (never dereferenced).
const void* At(uintptr_t a) { return reinterpret_cast<const void*>(a); }
constexpr uintptr_t kBase = uintptr_t{1} << 30;

using Pieces = std::vector<std::pair<size_t, size_t>>;

Pieces PiecesOf(const PinnedRegions& r, uintptr_t host, size_t bytes) {
  Pieces out;
  r.ForEachPiece(At(host), bytes, [&](size_t at, size_t n) {
    out.push_back({at, n});
    return true;
  });
  return out;
}

TEST(PinnedRegionsTest, WholePagesOnlyInsideTheRange) {
  // Starts 100 bytes into a page and ends mid-page 5 pages later.
  PageRange r = PinnedRegions::WholePages(At(kBase + 100), 5 * kPage, kPage);
  EXPECT_EQ(r.base, At(kBase + kPage));
  EXPECT_EQ(r.bytes, 4 * kPage);
  // Aligned at both ends: all of it.
  r = PinnedRegions::WholePages(At(kBase), 2 * kPage, kPage);
  EXPECT_EQ(r.base, At(kBase));
  EXPECT_EQ(r.bytes, 2 * kPage);
  // Less than a whole page, across a page boundary: nothing.
  EXPECT_TRUE(PinnedRegions::WholePages(At(kBase + 4000), 200, kPage).empty());
  EXPECT_TRUE(PinnedRegions::WholePages(At(kBase + 1), kPage, kPage).empty());
  EXPECT_TRUE(PinnedRegions::WholePages(nullptr, 10 * kPage, kPage).empty());
  EXPECT_TRUE(PinnedRegions::WholePages(At(kBase), 0, kPage).empty());
}

TEST(PinnedRegionsTest, CopiesSplitAtTheRegionsEdges) {
  PinnedRegions regions;
  const uintptr_t p = kBase + 100;
  const PageRange pages = PinnedRegions::WholePages(At(p), 5 * kPage, kPage);
  regions.Add(At(p), pages);
  const size_t head = kPage - 100;  // pageable bytes before the first whole page
  // The whole buffer: head, pinned middle, tail.
  EXPECT_EQ(PiecesOf(regions, p, 5 * kPage),
            (Pieces{{0, head}, {head, 4 * kPage}, {head + 4 * kPage, 100}}));
  // Inside the pinned pages: one piece.
  EXPECT_EQ(PiecesOf(regions, kBase + kPage + 8, 64), (Pieces{{0, 64}}));
  // Inside the head only.
  EXPECT_EQ(PiecesOf(regions, p, 10), (Pieces{{0, 10}}));
  // Nothing.
  EXPECT_TRUE(PiecesOf(regions, p, 0).empty());
  // Unknown memory entirely: one pageable piece.
  EXPECT_EQ(PiecesOf(regions, kBase + 100 * kPage, 3 * kPage), (Pieces{{0, 3 * kPage}}));
}

TEST(PinnedRegionsTest, ARangeOverSeveralRegionsAndAStopAfterAFailedCopy) {
  PinnedRegions regions;
  regions.Add(At(kBase + 4 * kPage), {reinterpret_cast<void*>(kBase + 4 * kPage), kPage});
  regions.Add(At(kBase + kPage), {reinterpret_cast<void*>(kBase + kPage), kPage});
  EXPECT_EQ(PiecesOf(regions, kBase, 6 * kPage), (Pieces{{0, kPage},
                                                         {kPage, kPage},
                                                         {2 * kPage, 2 * kPage},
                                                         {4 * kPage, kPage},
                                                         {5 * kPage, kPage}}));
  Pieces seen;
  regions.ForEachPiece(At(kBase), 6 * kPage, [&](size_t at, size_t n) {
    seen.push_back({at, n});
    return seen.size() < 2;
  });
  EXPECT_EQ(seen.size(), 2u);
}

TEST(PinnedRegionsTest, RemoveReturnsTheBaseOnce) {
  PinnedRegions regions;
  const PageRange pages = PinnedRegions::WholePages(At(kBase + 100), 3 * kPage, kPage);
  regions.Add(At(kBase + 100), pages);
  EXPECT_EQ(regions.Remove(At(kBase + 200)), nullptr);  // another pointer
  EXPECT_EQ(regions.Remove(At(kBase + 100)), pages.base);
  EXPECT_EQ(regions.Remove(At(kBase + 100)), nullptr);
  // Gone: the range is one pageable piece again.
  EXPECT_EQ(PiecesOf(regions, kBase + 100, 3 * kPage), (Pieces{{0, 3 * kPage}}));
}

// Property: over random regions and ranges, the pieces tile the range in
// order, and each piece is wholly inside one region or outside all.
TEST(PinnedRegionsTest, PiecesTileTheRangeProperty) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    PinnedRegions regions;
    std::vector<std::pair<uintptr_t, uintptr_t>> pinned;
    uintptr_t page = 0;
    for (int k = 0; k < 4; ++k) {
      page += 1 + rng() % 3;
      const uintptr_t len = 1 + rng() % 3;
      regions.Add(At(kBase + page * kPage),
                  {reinterpret_cast<void*>(kBase + page * kPage), len * kPage});
      pinned.push_back({kBase + page * kPage, kBase + (page + len) * kPage});
      page += len;
    }
    const uintptr_t begin = kBase + rng() % (page * kPage);
    const size_t bytes = 1 + rng() % (16 * kPage);
    size_t next = 0;
    regions.ForEachPiece(At(begin), bytes, [&](size_t at, size_t n) {
      EXPECT_EQ(at, next);
      EXPECT_GT(n, 0u);
      next = at + n;
      const uintptr_t pb = begin + at, pe = pb + n;
      bool inside = false, overlaps = false;
      for (const auto& [rb, re] : pinned) {
        inside = inside || (rb <= pb && pe <= re);
        overlaps = overlaps || (rb < pe && pb < re);
      }
      EXPECT_TRUE(inside || !overlaps) << "piece " << at << "+" << n;
      return true;
    });
    EXPECT_EQ(next, bytes);
  }
}

}  // namespace
}  // namespace tessel::gpu::internal
