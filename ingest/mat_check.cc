// Level 5: a walk over the element tags (file framing, then each variable's
// array header, data tags and, for structs and cells, their elements), with
// compressed variables inflated as a stream. 7.3: every dataset's size
// against the file's through the HDF5 API. Values are libmatio's to read.
#include "ingest/mat_check.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "ingest/hdf5.h"
#include "storage/file_io.h"

namespace shardkit {
namespace {

// MATLAB level 5 data types (miXXX) and array classes (mxXXX).
enum : uint32_t {
  miINT8 = 1,
  miUINT8 = 2,
  miINT16 = 3,
  miUINT16 = 4,
  miINT32 = 5,
  miUINT32 = 6,
  miSINGLE = 7,
  miDOUBLE = 9,
  miINT64 = 12,
  miUINT64 = 13,
  miMATRIX = 14,
  miCOMPRESSED = 15,
  miUTF8 = 16,
  miUTF16 = 17,
  miUTF32 = 18,
};
enum : uint8_t { mxCELL = 1, mxSTRUCT = 2, mxOBJECT = 3, mxCHAR = 4, mxSPARSE = 5 };
enum : uint8_t { mxDOUBLE = 6, mxUINT64 = 15, mxFUNCTION = 16, mxOPAQUE = 17 };

constexpr uint64_t kHeaderBytes = 128;
constexpr uint64_t kPrefix = 16 << 10;          // an array's header: flags, dims, name, data tag
constexpr uint64_t kMaxNameBytes = 4096;        // names and field names (MATLAB's: 63)
constexpr uint64_t kMaxWholeBytes = 256 << 20;  // a struct or cell variable, inflated
constexpr int kMaxRank = 32, kMaxDepth = 32;
// Struct fields and cells per variable: libmatio holds a few hundred bytes
// for each (the devkit's synsets have 15,000).
constexpr uint64_t kMaxContained = 1 << 20;
// zlib's largest expansion (RFC 1950/1951: 258 bytes from 2 bits): no
// compressed byte holds more than this many bytes of a 7.3 dataset.
constexpr uint64_t kMaxInflation = 1032;

uint32_t Le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Bytes per element of a numeric data type; 0 for any other.
uint64_t TypeSize(uint32_t type) {
  switch (type) {
    case miINT8:
    case miUINT8:
    case miUTF8:
      return 1;
    case miINT16:
    case miUINT16:
    case miUTF16:
      return 2;
    case miINT32:
    case miUINT32:
    case miSINGLE:
    case miUTF32:
      return 4;
    case miDOUBLE:
    case miINT64:
    case miUINT64:
      return 8;
    default:
      return 0;
  }
}

// One sub-element of an array: its type and where its data lies.
struct Element {
  uint32_t type = 0;
  uint64_t data = 0, size = 0, next = 0;
};

// The walk of one variable's bytes, `have` of its `total` present (a
// numeric array's header only; a struct or cell whole).
class ArrayWalk {
 public:
  ArrayWalk(std::string where) : where_(std::move(where)) {}

  Status Bad(const std::string& what) const { return Status::Corruption(where_ + ": " + what); }

  // The sub-element at `off`; its header must be present, its data within total.
  Status Next(const uint8_t* p, uint64_t have, uint64_t total, uint64_t off, const char* what,
              Element* e) const {
    if (off + 8 > total) return Bad(std::string("an array ends before its ") + what);
    if (off + 8 > have) return Bad(std::string("an array's ") + what + " is past its header");
    const uint32_t w0 = Le32(p + off);
    if ((w0 >> 16) != 0) {  // small element: 2-byte size, 2-byte type, 4 bytes of data
      e->type = w0 & 0xFFFF;
      e->size = w0 >> 16;
      if (e->size > 4) return Bad(std::string("a small ") + what + " of more than 4 bytes");
      e->data = off + 4;
      e->next = off + 8;
      return Status::OK();
    }
    e->type = w0;
    e->size = Le32(p + off + 4);
    e->data = off + 8;
    if (e->size > total - e->data) {
      return Bad(std::string("an array's ") + what + " declares " + std::to_string(e->size) +
                 " bytes, more than the array holds");
    }
    e->next = std::min(total, (e->data + e->size + 7) & ~uint64_t{7});
    return Status::OK();
  }

  // A miMATRIX payload. `name` receives its name (top level only).
  Status Array(const uint8_t* p, uint64_t have, uint64_t total, int depth, std::string* name) {
    if (total == 0) return Status::OK();  // an empty struct field or cell
    if (depth > kMaxDepth) return Bad("arrays nested over 32 deep");
    Element flags, dims, nm;
    SK_RETURN_IF_ERROR(Next(p, have, total, 0, "flags", &flags));
    if (flags.type != miUINT32 || flags.size != 8 || flags.data + 8 > have)
      return Bad("an array without its flags");
    const uint8_t cls = p[flags.data];
    const bool complex = (Le32(p + flags.data) & 0x800) != 0;
    SK_RETURN_IF_ERROR(Next(p, have, total, flags.next, "dimensions", &dims));
    const uint64_t rank = dims.size / 4;
    if (dims.type != miINT32 || dims.size % 4 != 0 || rank < 1 || rank > kMaxRank ||
        dims.data + dims.size > have) {
      return Bad("an array of bad dimensions (rank " + std::to_string(rank) + ")");
    }
    uint64_t numel = 1;
    for (uint64_t k = 0; k < rank; ++k) {
      const int32_t d = static_cast<int32_t>(Le32(p + dims.data + 4 * k));
      if (d < 0) return Bad("an array of a negative dimension");
      if (__builtin_mul_overflow(numel, uint64_t(d), &numel) || numel > (1ull << 48))
        return Bad("an array of over 2^48 elements");
    }
    SK_RETURN_IF_ERROR(Next(p, have, total, dims.next, "name", &nm));
    if ((nm.type != miINT8 && nm.type != miUTF8) || nm.size > kMaxNameBytes ||
        nm.data + nm.size > have) {
      return Bad("an array without a name");
    }
    if (name != nullptr) name->assign(reinterpret_cast<const char*>(p + nm.data), nm.size);
    const uint64_t off = nm.next;
    if (cls == mxCELL) return Cells(p, have, total, off, numel, depth);
    if (cls == mxSTRUCT || cls == mxOBJECT) return Fields(p, have, total, off, numel, cls, depth);
    if (cls == mxCHAR || (cls >= mxDOUBLE && cls <= mxUINT64)) {
      SK_RETURN_IF_ERROR(Data(p, have, total, off, numel, cls, &nm));
      return complex ? Data(p, have, total, nm.next, numel, cls, &nm) : Status::OK();
    }
    if (cls == mxSPARSE) return Sparse(p, have, total, off, complex);
    if (cls == mxFUNCTION || cls == mxOPAQUE) return Status::OK();  // libmatio skips them
    return Bad("an array of unknown class " + std::to_string(cls));
  }

 private:
  // A numeric or char array's data element: exactly numel elements of its type.
  Status Data(const uint8_t* p, uint64_t have, uint64_t total, uint64_t off, uint64_t numel,
              uint8_t cls, Element* e) const {
    if (numel == 0 && off >= total) return Status::OK();  // empty: no data element
    SK_RETURN_IF_ERROR(Next(p, have, total, off, "data", e));
    const uint64_t size = TypeSize(e->type);
    if (size == 0) return Bad("array data of unknown type " + std::to_string(e->type));
    // Text in UTF-8 takes 1 to 4 bytes a character.
    const bool utf8 = cls == mxCHAR && e->type == miUTF8;
    if (utf8 ? (e->size < numel || e->size > 4 * numel) : e->size != numel * size) {
      return Bad("array data of " + std::to_string(e->size) + " bytes for " +
                 std::to_string(numel) + " elements of " + std::to_string(size) + " bytes");
    }
    return Status::OK();
  }

  // A sparse array's row indices, column starts and values (libmatio
  // allocates each element's declared bytes): each within the array.
  Status Sparse(const uint8_t* p, uint64_t have, uint64_t total, uint64_t off, bool complex) const {
    if (have < total) return Bad("a sparse array not read whole");
    for (int part = 0; part < (complex ? 4 : 3); ++part) {
      Element e;
      SK_RETURN_IF_ERROR(Next(p, have, total, off, "sparse data", &e));
      if (TypeSize(e.type) == 0)
        return Bad("sparse data of unknown type " + std::to_string(e.type));
      off = e.next;
    }
    return Status::OK();
  }

  Status Cells(const uint8_t* p, uint64_t have, uint64_t total, uint64_t off, uint64_t numel,
               int depth) {
    if (have < total) return Bad("a cell array not read whole");
    if (numel > (total - std::min(off, total)) / 8)
      return Bad("a cell array of " + std::to_string(numel) + " elements in fewer bytes");
    SK_RETURN_IF_ERROR(Contain(numel));
    for (uint64_t i = 0; i < numel; ++i) {
      Element e;
      SK_RETURN_IF_ERROR(Next(p, have, total, off, "cell", &e));
      if (e.type != miMATRIX) return Bad("a cell that is not an array");
      SK_RETURN_IF_ERROR(Array(p + e.data, e.size, e.size, depth + 1, nullptr));
      off = e.next;
    }
    return Status::OK();
  }

  Status Fields(const uint8_t* p, uint64_t have, uint64_t total, uint64_t off, uint64_t numel,
                uint8_t cls, int depth) {
    if (have < total) return Bad("a struct array not read whole");
    Element e;
    if (cls == mxOBJECT) {
      SK_RETURN_IF_ERROR(Next(p, have, total, off, "class name", &e));
      off = e.next;
    }
    SK_RETURN_IF_ERROR(Next(p, have, total, off, "field name length", &e));
    const uint32_t len = e.size == 4 ? Le32(p + e.data) : 0;
    if (e.type != miINT32 || len == 0 || len > kMaxNameBytes)
      return Bad("a struct of bad field name length");
    SK_RETURN_IF_ERROR(Next(p, have, total, e.next, "field names", &e));
    if (e.type != miINT8 || e.size % len != 0) return Bad("a struct of bad field names");
    const uint64_t nfields = e.size / len;
    off = e.next;
    uint64_t count = 0;
    if (__builtin_mul_overflow(numel, nfields, &count) || count > (total - off) / 8) {
      return Bad("a struct array of " + std::to_string(numel) + " elements of " +
                 std::to_string(nfields) + " fields in fewer bytes");
    }
    SK_RETURN_IF_ERROR(Contain(count));
    for (uint64_t i = 0; i < count; ++i) {
      SK_RETURN_IF_ERROR(Next(p, have, total, off, "field", &e));
      if (e.type != miMATRIX) return Bad("a struct field that is not an array");
      SK_RETURN_IF_ERROR(Array(p + e.data, e.size, e.size, depth + 1, nullptr));
      off = e.next;
    }
    return Status::OK();
  }

  Status Contain(uint64_t n) {
    contained_ += n;
    return contained_ <= kMaxContained ? Status::OK()
                                       : Bad("over 1,048,576 struct fields and cells (not read)");
  }

  std::string where_;
  uint64_t contained_ = 0;
};

// Whether a variable is read whole (a struct, cell or sparse array: what
// libmatio reads as it lists the file). The class is the first byte of the
// flags' data: tag (8) + flags' tag (8).
bool IsContainer(const std::string& head) {
  if (head.size() < 17) return false;
  const uint8_t cls = static_cast<uint8_t>(head[16]);
  return cls == mxCELL || cls == mxSTRUCT || cls == mxOBJECT || cls == mxSPARSE;
}

// Reads exactly n bytes at off.
Status ReadAt(int fd, uint64_t off, void* dst, uint64_t n) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::IOError(std::string("read failed: ") + std::strerror(errno));
    if (got == 0) return Status::Corruption("the file ends early");
    p += got, off += static_cast<uint64_t>(got), n -= static_cast<uint64_t>(got);
  }
  return Status::OK();
}

// Inflates the compressed element whose `n` bytes (of `declared`) are at
// `off` to its end: its length and checksum. Keeps its first kPrefix bytes
// in `kept`, or all of them (up to kMaxWholeBytes) when it holds a struct or
// cell. Messages name no file (the caller adds it).
Status Inflate(int fd, uint64_t off, uint64_t n, uint64_t declared, std::string* kept,
               uint64_t* inflated) {
  z_stream z = {};
  if (inflateInit(&z) != Z_OK) return Status::IOError("zlib init failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, inflateEnd);
  std::vector<uint8_t> in(256 << 10), out(256 << 10);
  *inflated = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (z.avail_in == 0) {
      if (n == 0) {
        return Status::Corruption(n == declared ? "its compressed data ends early"
                                                : "truncated: the file ends inside it");
      }
      const uint64_t take = std::min<uint64_t>(n, in.size());
      SK_RETURN_IF_ERROR(ReadAt(fd, off, in.data(), take));
      off += take, n -= take;
      z.next_in = in.data();
      z.avail_in = static_cast<uInt>(take);
    }
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    rc = inflate(&z, Z_NO_FLUSH);
    const uint64_t got = out.size() - z.avail_out;
    for (uint64_t pos = 0; pos < got;) {
      // Whether to keep it all is known once the class is (17 bytes in).
      const uint64_t cap = kept->size() < 17 ? 17 : IsContainer(*kept) ? kMaxWholeBytes : kPrefix;
      if (kept->size() >= cap) {
        if (cap == kMaxWholeBytes) return Status::Corruption("a struct or cell over 256 MiB");
        break;
      }
      const uint64_t take = std::min(got - pos, cap - kept->size());
      kept->append(reinterpret_cast<const char*>(out.data() + pos), take);
      pos += take;
    }
    *inflated += got;
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      return Status::Corruption(std::string("corrupt compressed data (") +
                                (z.msg != nullptr ? z.msg : "zlib error") + ")");
    }
  }
  return Status::OK();
}

// The name in an array's header, if the bytes reach it ("" if not).
std::string PeekName(const std::string& bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  uint64_t off = 0;
  for (int k = 0; k < 3; ++k) {  // flags, dimensions, name
    if (off + 8 > bytes.size()) return "";
    const uint32_t w0 = Le32(p + off);
    const uint64_t size = (w0 >> 16) != 0 ? (w0 >> 16) : Le32(p + off + 4);
    const uint64_t data = off + ((w0 >> 16) != 0 ? 4 : 8);
    if (k == 2) {
      if (size > kMaxNameBytes || data + size > bytes.size()) return "";
      return std::string(reinterpret_cast<const char*>(p + data), size);
    }
    off = (w0 >> 16) != 0 ? off + 8 : (data + size + 7) & ~uint64_t{7};
  }
  return "";
}

// One top-level element of a level 5 file: its tag at `pos` declares
// `declared` bytes, of which `avail` are in the file. Checked; its name.
Status CheckVariable(int fd, uint64_t pos, uint32_t type, uint64_t declared, uint64_t avail,
                     const std::string& file, std::string* name) {
  std::string bytes;
  uint64_t total = declared, inflated = 0;
  Status read;
  if (type == miCOMPRESSED) {
    read = Inflate(fd, pos + 8, avail, declared, &bytes, &inflated);
    const auto* head = reinterpret_cast<const uint8_t*>(bytes.data());
    if (read.ok() && (bytes.size() < 8 || Le32(head) != miMATRIX))
      read = Status::Corruption("compressed data that is not an array");
    total = bytes.size() >= 8 ? Le32(head + 4) : 0;
    if (read.ok() && inflated != 8 + total) {
      read =
          Status::Corruption("declares " + std::to_string(total) +
                             " bytes, its compressed data holds " + std::to_string(inflated - 8));
    }
    if (read.ok() && avail < declared) {
      read = Status::Corruption("truncated: it declares " + std::to_string(declared) +
                                " bytes, the file holds " + std::to_string(avail));
    }
    bytes.erase(0, std::min<size_t>(8, bytes.size()));
  } else {
    bytes.resize(std::min(avail, kPrefix));
    read = ReadAt(fd, pos + 8, bytes.data(), bytes.size());
    const std::string head = std::string(8, '\0') + bytes.substr(0, 16);
    if (read.ok() && avail < declared) {
      read = Status::Corruption("truncated: it declares " + std::to_string(declared) +
                                " bytes, the file holds " + std::to_string(avail));
    } else if (read.ok() && IsContainer(head) && declared > bytes.size()) {
      if (declared > kMaxWholeBytes) return Status::Corruption("a struct or cell over 256 MiB");
      bytes.resize(declared);
      read = ReadAt(fd, pos + 8, bytes.data(), declared);
    }
  }
  *name = PeekName(bytes);
  const std::string where =
      file + ":" + (name->empty() ? "the variable at byte " + std::to_string(pos) : *name);
  SK_RETURN_IF_ERROR(read.WithContext(where));
  ArrayWalk walk(where);
  return walk.Array(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), total, 0,
                    nullptr);
}

Status CheckLevel5(int fd, uint64_t size, const std::string& file, MatFileInfo* info) {
  uint64_t pos = kHeaderBytes;
  while (pos < size) {
    uint8_t tag[8];
    if (size - pos < 8) {
      return Status::Corruption(file + ": truncated: " + std::to_string(size - pos) +
                                " stray bytes after the last variable");
    }
    SK_RETURN_IF_ERROR(ReadAt(fd, pos, tag, 8).WithContext(file));
    const uint32_t type = Le32(tag), n = Le32(tag + 4);
    if (type != miMATRIX && type != miCOMPRESSED) {
      return Status::Corruption(file + ": the element at byte " + std::to_string(pos) + " (type " +
                                std::to_string(type) + ") is not a variable");
    }
    std::string name;
    const uint64_t avail = std::min<uint64_t>(n, size - pos - 8);
    SK_RETURN_IF_ERROR(CheckVariable(fd, pos, type, n, avail, file, &name));
    info->names.push_back(name);
    pos += 8 + uint64_t{n};
  }
  return Status::OK();
}

// 7.3: each dataset at most what its file's bytes could hold, and the
// "MATLAB_empty" ones (their dimensions stored as data) a short vector.
struct Visit {
  uint64_t max_elements = 0;
  std::string file, bad;
  std::map<std::string, std::string>* unreadable = nullptr;  // MatFileInfo's
};

// The MATLAB_class attribute of a 7.3 dataset, or "" where it has none (or
// not as a string of at most 64 bytes).
std::string MatlabClass(hid_t d) {
  if (H5Aexists(d, "MATLAB_class") <= 0) return "";
  const hid_t a = H5Aopen(d, "MATLAB_class", H5P_DEFAULT);
  if (a < 0) return "";
  const hid_t ftype = H5Aget_type(a);
  std::string out;
  const size_t n = H5Tget_size(ftype);
  if (H5Tget_class(ftype) == H5T_STRING && H5Tis_variable_str(ftype) == 0 && n > 0 && n <= 64) {
    const hid_t mtype = H5Tcopy(H5T_C_S1);
    H5Tset_size(mtype, n);
    char buf[65] = {};
    if (H5Aread(a, mtype, buf) >= 0) out.assign(buf, strnlen(buf, n));
    H5Tclose(mtype);
  }
  H5Tclose(ftype);
  H5Aclose(a);
  return out;
}

// True where `type` (or, for a complex array, each member of its compound)
// stores what MATLAB's numeric `cls` stores, or cls is not a numeric class.
// libmatio converts whatever is stored into the declared class, clamping and
// rounding, so a file whose attribute says uint8 over doubles or int16s would
// pack other values than it holds.
bool StoredAsDeclared(hid_t type, const std::string& cls) {
  struct Numeric {
    const char* name;
    H5T_class_t type_class;
    size_t size;
    H5T_sign_t sign;  // H5T_SGN_ERROR: floats
  };
  static constexpr Numeric kNumeric[] = {
      {"double", H5T_FLOAT, 8, H5T_SGN_ERROR},   {"single", H5T_FLOAT, 4, H5T_SGN_ERROR},
      {"int8", H5T_INTEGER, 1, H5T_SGN_2},       {"uint8", H5T_INTEGER, 1, H5T_SGN_NONE},
      {"int16", H5T_INTEGER, 2, H5T_SGN_2},      {"uint16", H5T_INTEGER, 2, H5T_SGN_NONE},
      {"int32", H5T_INTEGER, 4, H5T_SGN_2},      {"uint32", H5T_INTEGER, 4, H5T_SGN_NONE},
      {"int64", H5T_INTEGER, 8, H5T_SGN_2},      {"uint64", H5T_INTEGER, 8, H5T_SGN_NONE},
      {"logical", H5T_INTEGER, 1, H5T_SGN_NONE}, {"char", H5T_INTEGER, 2, H5T_SGN_NONE},
  };
  const Numeric* want = nullptr;
  for (const Numeric& k : kNumeric) {
    if (cls == k.name) want = &k;
  }
  if (want == nullptr) return true;
  auto matches = [want](hid_t t) {
    if (H5Tget_class(t) != want->type_class || H5Tget_size(t) != want->size) return false;
    return want->type_class == H5T_FLOAT || H5Tget_sign(t) == want->sign;
  };
  if (H5Tget_class(type) != H5T_COMPOUND) return matches(type);
  const int members = H5Tget_nmembers(type);  // complex: {real, imag}
  bool ok = members == 2;
  for (int m = 0; ok && m < members; ++m) {
    const hid_t mt = H5Tget_member_type(type, static_cast<unsigned>(m));
    ok = mt >= 0 && matches(mt);
    if (mt >= 0) H5Tclose(mt);
  }
  return ok;
}

herr_t VisitObject(hid_t root, const char* name, const H5O_info_t* info, void* data) {
  auto* v = static_cast<Visit*>(data);
  if (info->type != H5O_TYPE_DATASET) return 0;
  const hid_t d = H5Dopen2(root, name, H5P_DEFAULT);
  if (d < 0) return 0;  // libmatio will fail on it by name
  const hid_t space = H5Dget_space(d);
  const int rank = H5Sget_simple_extent_ndims(space);
  hsize_t dims[H5S_MAX_RANK] = {};
  uint64_t numel = 1;
  bool overflow = rank < 0;
  if (rank > 0) H5Sget_simple_extent_dims(space, dims, nullptr);
  for (int k = 0; k < rank; ++k) overflow |= __builtin_mul_overflow(numel, dims[k], &numel);
  const std::string where = v->file + ":" + name;
  const bool empty = H5Aexists(d, "MATLAB_empty") > 0;
  if (overflow || numel > v->max_elements) {
    v->bad = where + ": declares more elements than the file's bytes could hold";
  } else if (empty && (numel > kMaxRank || (rank > 0 && dims[rank - 1] != numel))) {
    v->bad = where + ": an empty array whose dimensions are not a short vector";
  } else {
    // Data libmatio would read as other values: a variable (a dataset at the
    // root) is refused when it is asked for; a referenced one (a cell's or
    // struct's part) refuses the file.
    std::string wrong;
    if (Status s = CheckStoredInFile(d, where); !s.ok()) {
      wrong = s.message();
    } else if (!empty) {
      const std::string cls = MatlabClass(d);
      const hid_t type = H5Dget_type(d);
      if (type < 0 || !StoredAsDeclared(type, cls)) {
        wrong = where + ": declared " + cls + " (MATLAB_class) but stored as another type";
      }
      if (type >= 0) H5Tclose(type);
    }
    if (!wrong.empty() && std::strchr(name, '/') == nullptr) {
      (*v->unreadable)[name] = wrong;
    } else if (!wrong.empty()) {
      v->bad = wrong;
    }
  }
  H5Sclose(space);
  H5Dclose(d);
  return v->bad.empty() ? 0 : 1;
}

herr_t RootName(hid_t, const char* name, const H5L_info_t*, void* data) {
  if (name[0] != '#') static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

Status CheckLevel73(const std::string& path, uint64_t size, const std::string& file,
                    MatFileInfo* info) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (H5Fis_hdf5(path.c_str()) <= 0)
    return Status::Corruption(file + ": a MATLAB 7.3 header without an HDF5 file after it");
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0)
    return Status::Corruption(file + ": its HDF5 part cannot be opened (truncated or damaged)");
  Visit v;
  v.file = file;
  v.unreadable = &info->unreadable;
  v.max_elements = kMaxInflation * size;
  const herr_t rc = H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_NATIVE, VisitObject, &v, H5O_INFO_BASIC);
  hsize_t idx = 0;
  if (rc >= 0 && v.bad.empty())
    H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, RootName, &info->names);
  H5Fclose(f);
  if (!v.bad.empty()) return Status::Corruption(v.bad);
  if (rc < 0) return Status::Corruption(file + ": its HDF5 objects cannot be listed");
  return Status::OK();
}

}  // namespace

Result<MatFileInfo> CheckMatFile(const std::string& path, const std::string& where) {
  if (Status s = CheckRegularFile(path); !s.ok()) return path == where ? s : s.WithContext(where);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(where + ": cannot open: " + std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) return Status::IOError(where + ": cannot seek: " + std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(end);
  uint8_t header[kHeaderBytes];
  if (size < kHeaderBytes)
    return Status::Corruption(where + ": not a MATLAB file (shorter than its 128-byte header)");
  SK_RETURN_IF_ERROR(ReadAt(fd, 0, header, kHeaderBytes).WithContext(where));
  const uint16_t version = static_cast<uint16_t>(header[124] | (header[125] << 8));
  if (header[126] == 'M' && header[127] == 'I')
    return Status::Unsupported(where + ": a big-endian MATLAB file (not read)");
  if (header[126] != 'I' || header[127] != 'M' || (version != 0x0100 && version != 0x0200)) {
    return Status::Corruption(where +
                              ": not a MATLAB level 5 or 7.3 file (no MAT-file header; v4 files "
                              "are not read)");
  }
  MatFileInfo info;
  info.version = version == 0x0200 ? 73 : 5;
  if (info.version == 73) {
    SK_RETURN_IF_ERROR(CheckLevel73(path, size, where, &info));
  } else {
    SK_RETURN_IF_ERROR(CheckLevel5(fd, size, where, &info));
  }
  return info;
}

}  // namespace shardkit
