// Uploads to S3 (ObjectWritableFile: one PUT, or a multipart upload of
// parts sent in parallel) and the ETag such uploads are given (ObjectETag).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "storage/remote/digest.h"
#include "storage/remote/object_env.h"
#include "storage/remote/sigv4.h"

namespace shardkit {
namespace {

std::string CrcHex(uint32_t crc) {
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", crc);
  return hex;
}

// An object written through a buffer: one PUT when it is closed at
// kObjectPartBytes or less, else a multipart upload of kObjectPartBytes
// parts, up to kPartsInFlight of them at once (a part's request waits on
// the link and the server, not on the writer: one at a time, an object
// with few parts would go at a fraction of the link's rate). Every body is
// sent with its SHA-256 signed and its MD5 as a signed Content-MD5: S3
// refuses a body that is not the one sent, encrypted bucket or not (whose
// ETags are no MD5s: nothing here relies on them). The object carries its
// CRC32C (x-amz-meta-shardkit-crc32c) where it is known when the upload
// starts. The object exists only once Close completes it; an upload left
// unfinished is aborted.
class ObjectWritableFile final : public WritableFile {
 public:
  static constexpr size_t kPartsInFlight = 4;
  ObjectWritableFile(ObjectStore* store, Target t) : store_(store), t_(std::move(t)) {}
  ~ObjectWritableFile() override {
    abort_.store(true);  // parts in flight end now
    store_->client().Wake();
    store_->WakeBackoffs();
    WaitParts(0).IgnoreError();
    if (!upload_id_.empty()) {  // never completed (Close clears it once it is)
      store_->Call(t_, "DELETE", {{"uploadId", upload_id_}}, {}, {}).status().IgnoreError();
    }
  }
  const std::string& path() const override { return t_.shown; }
  Status Sync() override { return Status::OK(); }
  Status Close() override {
    if (closed_) return status_;
    closed_ = true;
    status_ = Finish();
    buffer_ = std::string();
    return status_;
  }

 protected:
  // Parts are sent as they fill, once a byte past them arrives (the last
  // part, 1 byte to a whole part, goes at Close); no byte is copied twice.
  Status AppendBytes(const char* data, size_t n) override {
    if (closed_) return Status::IOError(t_.shown + ": append after close");
    if (cancelled()) return Status::Aborted(t_.shown + ": upload cancelled");
    while (n > 0) {
      if (buffer_.size() == kObjectPartBytes) {
        SK_RETURN_IF_ERROR(UploadPart(std::move(buffer_)));
        buffer_ = std::string();
      }
      if (buffer_.capacity() < kObjectPartBytes) buffer_.reserve(kObjectPartBytes);
      const size_t take = std::min(n, kObjectPartBytes - buffer_.size());
      buffer_.append(data, take);
      data += take;
      n -= take;
    }
    return Status::OK();
  }

 private:
  struct Part {
    std::string md5;   // ours, 16 bytes
    std::string etag;  // the server's, as it answered (quoted)
  };
  // Sends `body` with its MD5 as Content-MD5 (and `headers`); the server's
  // ETag goes to part->etag.
  Status Put(const ObjectStore::Query& query, std::string_view body,
             std::vector<std::string> headers, Part* part) {
    part->md5 = digest::Md5(body);
    headers.push_back("Content-MD5: " + digest::Base64(part->md5));
    SK_ASSIGN_OR_RETURN(HttpResponse r, store_->Call(t_, "PUT", query, body, headers, &abort_));
    part->etag = r.header("etag");
    if (part->etag.empty()) return Status::IOError(t_.shown + ": the server gave no ETag for it");
    return Status::OK();
  }
  // Starts sending the next part in the background (after the oldest of
  // kPartsInFlight ended); the first error of any part is returned, then.
  Status UploadPart(std::string part) {
    if (upload_id_.empty()) {
      std::vector<std::string> headers;
      if (auto crc = expected_crc32c())
        headers.push_back("x-amz-meta-shardkit-crc32c: " + CrcHex(*crc));
      SK_ASSIGN_OR_RETURN(HttpResponse r,
                          store_->Call(t_, "POST", {{"uploads", ""}}, {}, headers, &abort_));
      upload_id_ = XmlText(XmlField(r.body, "UploadId"));
      if (upload_id_.empty())
        return Status::IOError(t_.shown + ": no UploadId in the server's reply");
    }
    SK_RETURN_IF_ERROR(WaitParts(kPartsInFlight - 1));
    const size_t i = parts_.size();
    parts_.emplace_back();
    auto sending = std::make_unique<Sending>();
    Sending* p = sending.get();
    p->body = std::move(part);
    p->thread = std::thread([this, p, i] {
      p->status = Put({{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id_}}, p->body,
                      {}, &parts_[i]);
      std::lock_guard<std::mutex> lock(mu_);
      p->done = true;
      done_cv_.notify_all();
    });
    sending_.push_back(std::move(sending));
    return Status::OK();
  }
  // Waits until at most `keep` parts are in flight: the first error, if
  // any. A cancel (CancelOn) seen meanwhile ends the parts under way.
  Status WaitParts(size_t keep) {
    Status first;
    while (sending_.size() > keep) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        Sending* p = sending_.front().get();
        while (!done_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return p->done; })) {
          if (cancelled() && !abort_.exchange(true)) {
            store_->client().Wake();
            store_->WakeBackoffs();
          }
        }
      }
      sending_.front()->thread.join();
      if (first.ok()) first = sending_.front()->status;
      sending_.pop_front();
    }
    if (!first.ok() && parts_status_.ok()) parts_status_ = first;
    return parts_status_;
  }
  Status Finish() {
    if (cancelled()) return Status::Aborted(t_.shown + ": upload cancelled");
    if (auto want = expected_crc32c(); want && *want != crc32c()) {
      return Status::Corruption(t_.shown + ": its bytes' CRC32C is " + CrcHex(crc32c()) +
                                ", not the " + CrcHex(*want) + " expected: not completed");
    }
    if (upload_id_.empty()) {
      Part whole;
      return Put({}, buffer_, {"x-amz-meta-shardkit-crc32c: " + CrcHex(crc32c())}, &whole);
    }
    if (!buffer_.empty()) SK_RETURN_IF_ERROR(UploadPart(std::move(buffer_)));
    SK_RETURN_IF_ERROR(WaitParts(0));
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < parts_.size(); ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + parts_[i].etag +
             "</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    auto r = store_->Call(t_, "POST", {{"uploadId", upload_id_}}, xml, {}, &abort_);
    if (!r.ok()) return CompletedAfterAll(r.status());
    upload_id_.clear();  // complete: nothing to abort
    // Where the server names parts by their MD5 (not an encrypted bucket),
    // the whole object's ETag follows from them: one more check.
    // Quoted or not: radosgw leaves the quotes out when a retry completes
    // an upload already completed.
    auto unquoted = [](std::string e) {
      if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
      return e;
    };
    const std::string got = unquoted(XmlText(XmlField(r->body, "ETag")));
    const std::string want = unquoted(ExpectedETag());
    if (!want.empty() && !got.empty() && got != want) {
      return Status::IOError(t_.shown + ": the completed upload's ETag is " + got + ", not " +
                             want);
    }
    return Status::OK();
  }
  // The ETag of the whole object where the server named every part by its
  // MD5; "" where it did not (an encrypted bucket): nothing to compare.
  std::string ExpectedETag() const {
    std::vector<std::string> md5s;
    for (const Part& p : parts_) {
      if (p.etag != "\"" + digest::Hex(p.md5) + "\"") return "";
      md5s.push_back(p.md5);
    }
    return ObjectETag::OfParts(md5s);
  }
  // CompleteMultipartUpload failed (its reply lost, and a retry told "no
  // such upload": the first one had completed it): the upload is whole if
  // the object is there with this file's size and checksum.
  Status CompletedAfterAll(Status error) {
    auto info = store_->Head(t_, &abort_);
    if (!info.ok() || info->size != size()) return error;
    const bool same = info->stored_crc32c ? *info->stored_crc32c == crc32c()
                                          : !ExpectedETag().empty() && info->etag == ExpectedETag();
    if (!same) return error;
    upload_id_.clear();
    return Status::OK();
  }

  struct Sending {
    std::string body;
    std::thread thread;
    Status status;
    bool done = false;  // under mu_
  };
  ObjectStore* const store_;
  const Target t_;
  std::string buffer_, upload_id_;
  // A deque, so that a part's thread writes its own element while the
  // next parts are added.
  std::deque<Part> parts_;
  std::deque<std::unique_ptr<Sending>> sending_;  // oldest first
  Status parts_status_;                           // the first part that failed
  std::atomic<bool> abort_{false};
  std::mutex mu_;
  std::condition_variable done_cv_;  // a part's thread ended
  bool closed_ = false;
  Status status_;
};

}  // namespace

Result<std::unique_ptr<WritableFile>> ObjectStore::NewWritableFile(const std::string& path) {
  SK_RETURN_IF_ERROR(WritableStore(path));
  SK_ASSIGN_OR_RETURN(Target t, Resolve(path));
  return std::unique_ptr<WritableFile>(new ObjectWritableFile(this, std::move(t)));
}

void ObjectETag::Update(std::string_view data) {
  size_ += data.size();
  while (!data.empty()) {
    if (in_part_ == kObjectPartBytes) {  // a full part, and more bytes: the next part
      md5s_.push_back(part_.Finish());
      in_part_ = 0;
    }
    const size_t take = std::min(data.size(), kObjectPartBytes - in_part_);
    part_.Update(data.substr(0, take));
    in_part_ += take;
    data.remove_prefix(take);
  }
}

std::string ObjectETag::Finish() {
  std::vector<std::string> md5s = std::move(md5s_);
  md5s.push_back(part_.Finish());
  md5s_.clear();
  in_part_ = 0;
  size_ = 0;
  return OfParts(md5s);
}

std::string ObjectETag::OfParts(const std::vector<std::string>& part_md5s) {
  if (part_md5s.size() == 1) return "\"" + digest::Hex(part_md5s[0]) + "\"";
  std::string all;
  for (const std::string& m : part_md5s) all += m;
  return "\"" + digest::Hex(digest::Md5(all)) + "-" + std::to_string(part_md5s.size()) + "\"";
}

}  // namespace shardkit
