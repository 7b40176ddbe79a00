// A MATLAB v5 reader for exactly what meta.mat holds (numeric and char
// arrays, struct and cell arrays, compressed elements), and the devkit's
// ground truth. Every length is checked against what is left of the buffer:
// a hostile .mat is an error naming the file, never a read out of bounds.
#include "ingest/devkit.h"

#include <zlib.h>

#include <cstdio>
#include <cstring>

#include "ingest/archive_reader.h"
#include "ingest/text.h"

namespace shardkit {
namespace {

enum MiType : uint32_t {
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
enum MxClass : uint8_t { mxCELL = 1, mxSTRUCT = 2, mxCHAR = 4 };

// A MATLAB value: numbers (as doubles), text, or a struct/cell array.
struct Value {
  uint8_t cls = 0;
  std::vector<double> numbers;
  std::string text;
  std::vector<std::string> fields;  // struct field names
  std::vector<Value> items;         // struct: element-major, fields within; cell: elements
};

class Reader {
 public:
  Reader(const std::string& where) : where_(where) {}

  Status Bad(const std::string& what) const {
    return Status::Corruption(where_ + ": not a MATLAB v5 file shardkit reads (" + what + ")");
  }

  // One data element at data[*pos], advancing *pos past it (and its padding).
  Status Element(const std::string& data, size_t* pos, uint32_t* type, std::string* payload,
                 int depth) {
    if (depth > 32) return Bad("elements nested too deep");
    if (data.size() - *pos < 8) return Bad("a truncated element tag");
    uint32_t w0, w1;
    std::memcpy(&w0, data.data() + *pos, 4);
    std::memcpy(&w1, data.data() + *pos + 4, 4);
    if ((w0 >> 16) != 0) {  // small data element: 2-byte size, 2-byte type, 4 bytes of data
      *type = w0 & 0xFFFF;
      const uint32_t n = w0 >> 16;
      if (n > 4) return Bad("a small element of more than 4 bytes");
      payload->assign(data.data() + *pos + 4, n);
      *pos += 8;
      return Status::OK();
    }
    *type = w0;
    const uint64_t n = w1;
    if (n > data.size() - *pos - 8) return Bad("an element longer than the file");
    payload->assign(data.data() + *pos + 8, n);
    *pos += 8 + n;
    if (*type != miCOMPRESSED) *pos = std::min<size_t>(data.size(), (*pos + 7) & ~size_t(7));
    if (*type == miCOMPRESSED) {
      std::string inflated;
      SK_RETURN_IF_ERROR(Inflate(*payload, &inflated));
      size_t p = 0;
      return Element(inflated, &p, type, payload, depth + 1);
    }
    return Status::OK();
  }

  Status Inflate(const std::string& in, std::string* out) {
    z_stream z = {};
    if (inflateInit(&z) != Z_OK) return Bad("zlib");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    char buf[1 << 16];
    int r = Z_OK;
    while (r == Z_OK) {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof(buf);
      r = inflate(&z, Z_NO_FLUSH);
      out->append(buf, sizeof(buf) - z.avail_out);
      if (out->size() > (256u << 20)) {
        inflateEnd(&z);
        return Bad("a compressed element over 256 MiB");
      }
    }
    inflateEnd(&z);
    return r == Z_STREAM_END ? Status::OK() : Bad("a corrupt compressed element");
  }

  static Status Numbers(uint32_t type, const std::string& p, std::vector<double>* out) {
    auto take = [&](auto zero) {
      using T = decltype(zero);
      const size_t n = p.size() / sizeof(T);
      for (size_t i = 0; i < n; ++i) {
        T v;
        std::memcpy(&v, p.data() + i * sizeof(T), sizeof(T));
        out->push_back(static_cast<double>(v));
      }
    };
    switch (type) {
      case miINT8:
        take(int8_t());
        break;
      case miUINT8:
      case miUTF8:
        take(uint8_t());
        break;
      case miINT16:
        take(int16_t());
        break;
      case miUINT16:
      case miUTF16:
        take(uint16_t());
        break;
      case miINT32:
        take(int32_t());
        break;
      case miUINT32:
      case miUTF32:
        take(uint32_t());
        break;
      case miSINGLE:
        take(float());
        break;
      case miDOUBLE:
        take(double());
        break;
      case miINT64:
        take(int64_t());
        break;
      case miUINT64:
        take(uint64_t());
        break;
      default:
        return Status::Corruption("unknown numeric type " + std::to_string(type));
    }
    return Status::OK();
  }

  // A miMATRIX element's payload.
  Status Matrix(const std::string& m, Value* v, std::string* name, int depth) {
    if (depth > 16) return Bad("arrays nested too deep");
    if (m.empty()) return Status::OK();  // an empty array
    size_t pos = 0;
    uint32_t type;
    std::string flags, dims, nm;
    SK_RETURN_IF_ERROR(Element(m, &pos, &type, &flags, depth));
    if (type != miUINT32 || flags.size() < 8) return Bad("array flags");
    v->cls = static_cast<uint8_t>(flags[0]);
    SK_RETURN_IF_ERROR(Element(m, &pos, &type, &dims, depth));
    if (type != miINT32 || dims.size() < 8) return Bad("array dimensions");
    uint64_t count = 1;
    for (size_t i = 0; i + 4 <= dims.size(); i += 4) {
      int32_t d;
      std::memcpy(&d, dims.data() + i, 4);
      if (d < 0) return Bad("a negative dimension");
      count *= static_cast<uint64_t>(d);
      if (count > (1u << 24)) return Bad("an array of over 16M elements");
    }
    SK_RETURN_IF_ERROR(Element(m, &pos, &type, &nm, depth));
    if (name != nullptr) *name = nm;
    if (v->cls == mxSTRUCT) {
      std::string len_bytes, names;
      SK_RETURN_IF_ERROR(Element(m, &pos, &type, &len_bytes, depth));
      if (len_bytes.size() < 4) return Bad("struct field name length");
      int32_t len;
      std::memcpy(&len, len_bytes.data(), 4);
      SK_RETURN_IF_ERROR(Element(m, &pos, &type, &names, depth));
      if (len <= 0 || len > 64 || names.size() % static_cast<size_t>(len) != 0)
        return Bad("struct field names");
      for (size_t i = 0; i < names.size(); i += static_cast<size_t>(len))
        v->fields.emplace_back(names.c_str() + i,
                               strnlen(names.data() + i, static_cast<size_t>(len)));
      if (count * v->fields.size() > (1u << 24)) return Bad("a struct of too many fields");
      for (uint64_t i = 0; i < count * v->fields.size(); ++i) {
        std::string sub;
        SK_RETURN_IF_ERROR(Element(m, &pos, &type, &sub, depth));
        if (type != miMATRIX) return Bad("a struct field that is not an array");
        v->items.emplace_back();
        SK_RETURN_IF_ERROR(Matrix(sub, &v->items.back(), nullptr, depth + 1));
      }
      return Status::OK();
    }
    if (v->cls == mxCELL) {
      for (uint64_t i = 0; i < count; ++i) {
        std::string sub;
        SK_RETURN_IF_ERROR(Element(m, &pos, &type, &sub, depth));
        if (type != miMATRIX) return Bad("a cell that is not an array");
        v->items.emplace_back();
        SK_RETURN_IF_ERROR(Matrix(sub, &v->items.back(), nullptr, depth + 1));
      }
      return Status::OK();
    }
    std::string real;
    if (pos < m.size()) SK_RETURN_IF_ERROR(Element(m, &pos, &type, &real, depth));
    if (v->cls == mxCHAR) {
      if (type == miUTF8 || type == miINT8 || type == miUINT8) {
        v->text = real;
      } else {
        std::vector<double> codes;
        SK_RETURN_IF_ERROR(Numbers(type, real, &codes));
        for (double c : codes) v->text += c < 128 ? static_cast<char>(c) : '?';
      }
      return Status::OK();
    }
    Status s = Numbers(type, real, &v->numbers);
    return s.ok() ? s : Bad(s.message());
  }

 private:
  std::string where_;
};

}  // namespace

Result<std::map<int, std::string>> ParseMetaMat(const std::string& bytes,
                                                const std::string& where) {
  Reader r(where);
  if (bytes.size() < 128 || bytes.compare(0, 6, "MATLAB") != 0)
    return r.Bad("no MATLAB 5.0 header");
  if (bytes[126] != 'I' || bytes[127] != 'M') return r.Bad("big-endian files are not read");
  size_t pos = 128;
  while (pos < bytes.size()) {
    uint32_t type;
    std::string payload;
    SK_RETURN_IF_ERROR(r.Element(bytes, &pos, &type, &payload, 0));
    if (type != miMATRIX) continue;
    Value v;
    std::string name;
    SK_RETURN_IF_ERROR(r.Matrix(payload, &v, &name, 0));
    if (name != "synsets") continue;
    if (v.cls != mxSTRUCT) return r.Bad("synsets is not a struct array");
    size_t id_field = v.fields.size(), wnid_field = v.fields.size();
    for (size_t f = 0; f < v.fields.size(); ++f) {
      if (v.fields[f] == "ILSVRC2012_ID") id_field = f;
      if (v.fields[f] == "WNID") wnid_field = f;
    }
    if (id_field == v.fields.size() || wnid_field == v.fields.size())
      return r.Bad("synsets has no ILSVRC2012_ID or WNID field");
    std::map<int, std::string> out;
    const size_t nf = v.fields.size();
    for (size_t i = 0; i + nf <= v.items.size(); i += nf) {
      const Value& id = v.items[i + id_field];
      const Value& wnid = v.items[i + wnid_field];
      if (id.numbers.size() != 1 || wnid.text.empty()) return r.Bad("a synset without id or WNID");
      out[static_cast<int>(id.numbers[0])] = wnid.text;
    }
    if (out.empty()) return r.Bad("no synsets");
    return out;
  }
  return r.Bad("no variable named synsets");
}

Result<std::vector<std::pair<std::string, std::string>>> ReadDevkitValLabels(
    const std::string& devkit) {
  SK_ASSIGN_OR_RETURN(std::string mat, ReadArchiveMember(devkit, "data/meta.mat", 64u << 20));
  SK_ASSIGN_OR_RETURN(auto wnid_of, ParseMetaMat(mat, devkit + ":data/meta.mat"));
  const std::string gt_name = "data/ILSVRC2012_validation_ground_truth.txt";
  SK_ASSIGN_OR_RETURN(std::string gt, ReadArchiveMember(devkit, gt_name, 64u << 20));
  std::vector<std::pair<std::string, std::string>> rows;
  int line = 0;  // the val image's number: the n-th non-blank line
  for (const auto& [unused, text] : TextLines(gt)) {
    ++line;
    char* rest = nullptr;
    const long id = std::strtol(text.c_str(), &rest, 10);
    auto it = wnid_of.find(static_cast<int>(id));
    if (rest == text.c_str() || *rest != '\0' || it == wnid_of.end()) {
      return Status::Corruption(devkit + ":" + gt_name + ":" + std::to_string(line) + ": '" +
                                text.substr(0, 40) + "' is not an ILSVRC2012_ID of meta.mat");
    }
    char stem[64];
    std::snprintf(stem, sizeof(stem), "ILSVRC2012_val_%08d", line);
    rows.emplace_back(stem, it->second);
  }
  if (rows.empty()) return Status::Corruption(devkit + ":" + gt_name + ": no labels");
  return rows;
}

}  // namespace shardkit
