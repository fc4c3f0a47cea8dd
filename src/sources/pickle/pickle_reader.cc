#include "sources/pickle/pickle_reader.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "sources/pickle/document_builder.h"
#include "sources/pickle/memo_references.h"
#include "sources/pickle/pickle_opcodes.h"

namespace vramscope::pickle {

namespace {

// Opcodes that import a callable or call one: the ways a pickle executes code.
const char* CodeExecutingOpcodeName(uint8_t op) {
  switch (op) {
    case kGlobal:
      return "GLOBAL";
    case kStackGlobal:
      return "STACK_GLOBAL";
    case kReduce:
      return "REDUCE";
    case kBuild:
      return "BUILD";
    case kInst:
      return "INST";
    case kObj:
      return "OBJ";
    case kNewObj:
      return "NEWOBJ";
    case kNewObjEx:
      return "NEWOBJ_EX";
    case kPersId:
      return "PERSID";
    case kBinPersId:
      return "BINPERSID";
    case kExt1:
      return "EXT1";
    case kExt2:
      return "EXT2";
    case kExt4:
      return "EXT4";
    default:
      return nullptr;
  }
}

constexpr uint64_t kProgressStep = uint64_t{8} << 20;

void AdviseHugePages(const void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace

DocumentBuilder::DocumentBuilder(std::span<const uint8_t> input, const ParseOptions& options)
    : in_(input), options_(options), sink_(options.sink) {
  doc_.input_ = input;
  // Reserve address space generously: untouched pages cost no memory, and avoiding
  // reallocation keeps the peak near the final size. Capped so huge inputs stay within what
  // the kernel's overcommit heuristics allow.
  const size_t cap = size_t{1} << 27;
  doc_.items_.reserve(std::min(input.size() / 4 + 64, cap));
  doc_.containers_.reserve(std::min(input.size() / 16 + 16, cap / 2));
  memo_.reserve(std::min(input.size() / 8 + 16, cap));
  // Huge pages for the big arrays: a fifth of parse time went to 4 KiB page faults.
  AdviseHugePages(doc_.items_.data(), doc_.items_.capacity() * sizeof(Value));
  AdviseHugePages(doc_.containers_.data(),
                  doc_.containers_.capacity() * sizeof(Document::Container));
  AdviseHugePages(memo_.data(), memo_.capacity() * sizeof(Value));
  // Only a sink's batches are reclaimed, so only then is the memo worth trimming.
  if (sink_ != nullptr && options.drop_unread_memo) {
    memo_reads_ = MemoReferences::Scan(input, options.scanned);
    unread_memo_dropped_ = true;
  }
}

Status DocumentBuilder::Run(ParseInfo* info) {
  uint64_t next_progress = kProgressStep;
  bool stop = false;
  while (!stop) {
    if (pos_ >= in_.size()) {
      if (in_.empty()) {
        Fail(0, "the file is empty; a pickle holds at least one opcode");
      } else if (options_.recover_truncated) {
        if (!Recover(pos_, info)) return error_;
        break;
      } else {
        Fail(pos_, "the file ends before the pickle's STOP opcode (truncated)");
      }
      return error_;
    }
    const uint64_t at = pos_;
    const uint8_t op = in_[pos_++];
    ++opcodes_;
    if (!Step(op, at, &stop)) {
      // An opcode whose argument the cut fell in changed nothing yet: recover from before it.
      if (!(eof_ && options_.recover_truncated)) return error_;
      pos_ = at;
      if (!Recover(at, info)) return error_;
      break;
    }
    if (pos_ >= next_progress) {
      if (options_.progress && !options_.progress(pos_, in_.size())) {
        return Interrupted("interrupted: reading the input was cancelled");
      }
      next_progress = pos_ + kProgressStep;
    }
  }
  GatherRuns();
  if (info != nullptr) {
    info->protocol = protocol_;
    info->opcodes = opcodes_;
    info->consumed_items = consumed_items_;
    info->reclaimed_batches = reclaimed_batches_;
  }
  if (options_.progress) options_.progress(in_.size(), in_.size());
  return Status::Ok();
}

inline bool DocumentBuilder::Step(uint8_t op, uint64_t at, bool* stop) {
  switch (op) {
    case kProto: {
      if (!Have(1)) return Truncated(at, "PROTO", 1);
      protocol_ = in_[pos_++];
      if (protocol_ > 5) {
        return Fail(at, fmt::format("pickle protocol {} is not supported (0-5 are)", protocol_));
      }
      return true;
    }
    case kFrame: {
      if (!Have(8)) return Truncated(at, "FRAME", 8);
      const uint64_t len = ReadLE(8);
      if (!Have(len) && !options_.recover_truncated) {
        return Truncated(at, "FRAME", len - (in_.size() - pos_));
      }
      return true;  // framing only groups reads; the content is parsed as it comes
    }
    case kStop: {
      if (stack_.empty()) return Fail(at, "STOP with an empty stack (corrupt pickle)");
      if (!marks_.empty() && stack_.size() <= marks_.back()) {
        return Fail(at, "STOP finds an unclosed MARK on top of the stack (corrupt pickle)");
      }
      doc_.root_ = stack_.back();
      *stop = true;
      return true;
    }
    case kMark:
      marks_.push_back(stack_.size());
      OnMark();
      return true;
    case kPop:
      if (!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back())) {
        stack_.pop_back();
        return true;
      }
      if (!marks_.empty()) {
        marks_.pop_back();
        if (batch_.active && marks_.size() < batch_.depth) batch_ = Batch{};
        return true;
      }
      return Fail(at, "POP with an empty stack (corrupt pickle)");
    case kPopMark: {
      size_t mark = 0;
      if (!(PopMark(at, "POP_MARK", &mark))) return false;
      if (batch_.closed) batch_ = Batch{};
      stack_.resize(mark);
      return true;
    }
    case kDup:
      if (!(Need(at, "DUP", 1))) return false;
      stack_.push_back(stack_.back());
      return true;

    // --- scalars --------------------------------------------------------------------------
    case kNone:
      stack_.push_back(MakeSpecial(0));
      return true;
    case kNewFalse:
      stack_.push_back(MakeSpecial(1));
      return true;
    case kNewTrue:
      stack_.push_back(MakeSpecial(2));
      return true;
    case kBinInt:
      if (!Have(4)) return Truncated(at, "BININT", 4);
      stack_.push_back(MakeInt(static_cast<int32_t>(static_cast<uint32_t>(ReadLE(4)))));
      return true;
    case kBinInt1:
      if (!Have(1)) return Truncated(at, "BININT1", 1);
      stack_.push_back(MakeInt(static_cast<int64_t>(ReadLE(1))));
      return true;
    case kBinInt2:
      if (!Have(2)) return Truncated(at, "BININT2", 2);
      stack_.push_back(MakeInt(static_cast<int64_t>(ReadLE(2))));
      return true;
    case kLong1:
    case kLong4: {
      const size_t width = op == kLong1 ? 1 : 4;
      const char* name = op == kLong1 ? "LONG1" : "LONG4";
      if (!Have(width)) return Truncated(at, name, width);
      const uint64_t raw = ReadLE(width);
      if (op == kLong4 && static_cast<int32_t>(static_cast<uint32_t>(raw)) < 0) {
        return Fail(at, "LONG4 has a negative byte count (corrupt pickle)");
      }
      if (!Have(raw)) return Truncated(at, name, raw - (in_.size() - pos_));
      stack_.push_back(MakeLong(in_.data() + pos_, raw));
      pos_ += raw;
      return true;
    }
    case kInt: {
      std::string_view line;
      if (!(ReadLine(at, "INT", &line))) return false;
      if (line == "00" || line == "01") {
        stack_.push_back(MakeSpecial(line == "01" ? 2 : 1));
        return true;
      }
      Value v;
      if (!(MakeDecimal(at, "INT", line, &v))) return false;
      stack_.push_back(v);
      return true;
    }
    case kLong: {
      std::string_view line;
      if (!(ReadLine(at, "LONG", &line))) return false;
      Value v;
      if (!(MakeDecimal(at, "LONG", line, &v))) return false;
      stack_.push_back(v);
      return true;
    }
    case kBinFloat: {
      if (!Have(8)) return Truncated(at, "BINFLOAT", 8);
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | in_[pos_ + i];  // big-endian
      pos_ += 8;
      double d;
      std::memcpy(&d, &bits, sizeof(d));
      stack_.push_back(MakeFloat(d));
      return true;
    }
    case kFloat: {
      std::string_view line;
      if (!(ReadLine(at, "FLOAT", &line))) return false;
      double d = 0;
      const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), d);
      if (ec != std::errc() || end != line.data() + line.size()) {
        if (line == "nan" || line == "inf" || line == "-inf") {
          d = line == "nan"   ? std::numeric_limits<double>::quiet_NaN()
              : line == "inf" ? std::numeric_limits<double>::infinity()
                              : -std::numeric_limits<double>::infinity();
        } else {
          return Fail(at, fmt::format("FLOAT argument '{}' is not a number",
                                      std::string(line.substr(0, 40))));
        }
      }
      stack_.push_back(MakeFloat(d));
      return true;
    }

    // --- strings and bytes ----------------------------------------------------------------
    case kShortBinUnicode:
    case kBinUnicode:
    case kBinUnicode8:
    case kShortBinString:
    case kBinString: {
      const char* name = op == kShortBinUnicode ? "SHORT_BINUNICODE"
                         : op == kBinUnicode    ? "BINUNICODE"
                         : op == kBinUnicode8   ? "BINUNICODE8"
                         : op == kBinString     ? "BINSTRING"
                                                : "SHORT_BINSTRING";
      const size_t width = (op == kShortBinUnicode || op == kShortBinString) ? 1
                           : op == kBinUnicode8                              ? 8
                                                                             : 4;
      if (!Have(width)) return Truncated(at, name, width);
      const uint64_t len = ReadLE(width);
      if (op == kBinString && static_cast<int32_t>(static_cast<uint32_t>(len)) < 0) {
        return Fail(at, "BINSTRING has a negative length (corrupt pickle)");
      }
      if (!Have(len)) return Truncated(at, name, len - (in_.size() - pos_));
      Value v;
      if (!(MakeFileString(at, pos_, len, &v))) return false;
      pos_ += len;
      stack_.push_back(v);
      return true;
    }
    case kShortBinBytes:
    case kBinBytes:
    case kBinBytes8:
    case kByteArray8: {
      const char* name = op == kShortBinBytes ? "SHORT_BINBYTES"
                         : op == kBinBytes    ? "BINBYTES"
                         : op == kBinBytes8   ? "BINBYTES8"
                                              : "BYTEARRAY8";
      const size_t width = op == kShortBinBytes ? 1 : op == kBinBytes ? 4 : 8;
      if (!Have(width)) return Truncated(at, name, width);
      const uint64_t len = ReadLE(width);
      if (!Have(len)) return Truncated(at, name, len - (in_.size() - pos_));
      stack_.push_back(MakeOwned(std::string(reinterpret_cast<const char*>(in_.data() + pos_), len),
                                 Value::kTagBytes));
      pos_ += len;
      return true;
    }
    case kUnicode: {
      std::string_view line;
      if (!(ReadLine(at, "UNICODE", &line))) return false;
      Value v;
      if (!(DecodeUnicodeEscape(at, line, &v))) return false;
      stack_.push_back(v);
      return true;
    }
    case kString: {
      std::string_view line;
      if (!(ReadLine(at, "STRING", &line))) return false;
      Value v;
      if (!(DecodeQuotedString(at, line, &v))) return false;
      stack_.push_back(v);
      return true;
    }

    // --- containers -----------------------------------------------------------------------
    case kEmptyList:
    case kEmptyDict:
    case kEmptyTuple:
    case kEmptySet: {
      const Kind kind = op == kEmptyList    ? Kind::kList
                        : op == kEmptyDict  ? Kind::kDict
                        : op == kEmptyTuple ? Kind::kTuple
                                            : Kind::kSet;
      Value v;
      if (!(NewContainer(at, kind, nullptr, 0, &v))) return false;
      stack_.push_back(v);
      return true;
    }
    case kTuple1:
    case kTuple2:
    case kTuple3: {
      const size_t n = op - kTuple1 + 1;
      if (!(Need(at, n == 1 ? "TUPLE1" : n == 2 ? "TUPLE2" : "TUPLE3", n))) return false;
      Value v;
      if (!(NewContainer(at, Kind::kTuple, stack_.data() + stack_.size() - n, n, &v))) return false;
      stack_.resize(stack_.size() - n);
      stack_.push_back(v);
      return true;
    }
    case kTuple:
    case kList:
    case kFrozenSet:
    case kDict: {
      const char* name = op == kTuple  ? "TUPLE"
                         : op == kList ? "LIST"
                         : op == kDict ? "DICT"
                                       : "FROZENSET";
      size_t mark = 0;
      if (!(PopMark(at, name, &mark))) return false;
      const size_t n = stack_.size() - mark;
      if (op == kDict && n % 2 != 0) {
        return Fail(at, "DICT has an odd number of items (a key without a value)");
      }
      const Kind kind = op == kTuple  ? Kind::kTuple
                        : op == kList ? Kind::kList
                        : op == kDict ? Kind::kDict
                                      : Kind::kSet;
      Value v;
      if (!(NewContainer(at, kind, stack_.data() + mark, n, &v))) return false;
      stack_.resize(mark);
      stack_.push_back(v);
      return true;
    }
    case kAppend: {
      if (!(Need(at, "APPEND", 2))) return false;
      const Value item = stack_.back();
      stack_.pop_back();
      if (sink_ != nullptr && stack_.back().tag() == Value::kTagContainer &&
          doc_.containers_[stack_.back().payload()].kind == Kind::kList && !batch_.active &&
          sink_->Wants(doc_, std::span(stack_.data(), stack_.size() - 1), stack_.back())) {
        return ConsumeItems(at, stack_.size() - 1, stack_.back(), std::span(&item, 1));
      }
      return Extend(at, stack_.back(), Kind::kList, &item, 1, "APPEND");
    }
    case kSetItem: {
      if (!(Need(at, "SETITEM", 3))) return false;
      const Value pair[2] = {stack_[stack_.size() - 2], stack_[stack_.size() - 1]};
      stack_.resize(stack_.size() - 2);
      return Extend(at, stack_.back(), Kind::kDict, pair, 2, "SETITEM");
    }
    case kAppends:
    case kSetItems:
    case kAddItems: {
      const char* name = op == kAppends ? "APPENDS" : op == kSetItems ? "SETITEMS" : "ADDITEMS";
      size_t mark = 0;
      if (!(PopMark(at, name, &mark))) return false;
      if (mark == 0 || (!marks_.empty() && mark <= marks_.back())) {
        return Fail(
            at, fmt::format("{} has no target container below its MARK (corrupt pickle)", name));
      }
      const size_t n = stack_.size() - mark;
      if (op == kSetItems && n % 2 != 0) {
        return Fail(at, "SETITEMS has an odd number of items (a key without a value)");
      }
      const Kind want = op == kAppends ? Kind::kList : op == kSetItems ? Kind::kDict : Kind::kSet;
      if (op == kAppends && batch_.closed) {
        // The end of a batch of a list the sink wants: convert, then release the batch.
        // Containers older than the batch that the sink reads are gathered first, while the
        // batch is open: gathering moves their items past the batch's watermark, which counts
        // as a write to an old container, so the batch is then retired instead of reclaimed
        // (reclaiming would cut the gathered items off).
        GatherForSink(std::span(stack_.data() + mark, n));
        const Batch batch = batch_;
        batch_ = Batch{};
        if (!ConsumeItems(at, mark - 1, stack_[mark - 1], std::span(stack_.data() + mark, n))) {
          return false;
        }
        if (batch.old_writes == 0) {
          batch_ = batch;  // Reclaim reads the watermarks
          Reclaim(std::span(stack_.data() + mark, n));
          batch_ = Batch{};
        } else {
          // Not reclaimed, but the consumed items must still never be reached again (a later
          // change to one would not be seen): retire their memo slots.
          RetireConsumed(batch.memo, std::span(stack_.data() + mark, n));
        }
        stack_.resize(mark);
        return true;
      }
      if (batch_.closed) batch_ = Batch{};
      if (!(Extend(at, stack_[mark - 1], want, stack_.data() + mark, n, name))) return false;
      stack_.resize(mark);
      return true;
    }

    // --- memo -----------------------------------------------------------------------------
    case kMemoize:
      if (!(Need(at, "MEMOIZE", 1))) return false;
      MemoPut(memo_count_, stack_.back());
      return true;
    case kBinPut:
    case kLongBinPut:
    case kPut: {
      const char* name = op == kBinPut ? "BINPUT" : op == kLongBinPut ? "LONG_BINPUT" : "PUT";
      uint64_t index;
      if (op == kPut) {
        std::string_view line;
        if (!(ReadLine(at, name, &line))) return false;
        const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), index);
        if (ec != std::errc() || end != line.data() + line.size()) {
          return Fail(at, "PUT argument is not a memo index");
        }
      } else {
        const size_t width = op == kBinPut ? 1 : 4;
        if (!Have(width)) return Truncated(at, name, width);
        index = ReadLE(width);
      }
      if (!(Need(at, name, 1))) return false;
      MemoPut(index, stack_.back());
      return true;
    }
    case kBinGet:
    case kLongBinGet:
      return MemoGetRun(op, at);
    case kGet: {
      uint64_t index;
      std::string_view line;
      if (!(ReadLine(at, "GET", &line))) return false;
      const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), index);
      if (ec != std::errc() || end != line.data() + line.size()) {
        return Fail(at, "GET argument is not a memo index");
      }
      Value v;
      if (!(MemoGet(at, index, &v))) return false;
      stack_.push_back(v);
      return true;
    }

    case kNextBuffer:
    case kReadOnlyBuffer:
      return Fail(at, fmt::format("opcode {} (out-of-band buffer) is not supported: memory "
                                  "snapshots never use it",
                                  op == kNextBuffer ? "NEXT_BUFFER" : "READONLY_BUFFER"));
    default:
      break;
  }
  if (const char* name = CodeExecutingOpcodeName(op)) {
    return Fail(at, fmt::format("refusing opcode {} (0x{:02x}): it imports or calls code, and a "
                                "memory snapshot holds only plain data; this file is not a "
                                "snapshot, or it was tampered with",
                                name, op));
  }
  return Fail(at, fmt::format("unknown opcode 0x{:02x}: not a pickle, or corrupt", op));
}

bool DocumentBuilder::Close(uint8_t op, uint64_t cut_at) {
  bool stop = false;
  return Step(op, cut_at, &stop);
}

Result<Document> Parse(std::span<const uint8_t> input, const ParseOptions& options,
                       ParseInfo* info) {
  DocumentBuilder builder(input, options);
  RETURN_IF_ERROR(builder.Run(info));
  return builder.Take();
}

}  // namespace vramscope::pickle
