// Uploads to S3 (ObjectWritableFile: one PUT, or a multipart upload of
// parts sent in parallel) and the ETag such uploads are given (ObjectETag).
#include <deque>
#include <thread>

#include "storage/remote/digest.h"
#include "storage/remote/object_env.h"
#include "storage/remote/sigv4.h"

namespace shardkit {
namespace {

class ObjectWritableFile final : public WritableFile {
 public:
  static constexpr size_t kPartsInFlight = 4;
  ObjectWritableFile(ObjectStore* store, Target t) : store_(store), t_(std::move(t)) {}
  ~ObjectWritableFile() override {
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
  // Sends `body` with its MD5 (signed, as Content-MD5: the payload's
  // integrity, so it is not hashed a second time) and checks the ETag S3
  // answers with. The MD5 is left in *md5.
  Status Put(const ObjectStore::Query& query, std::string_view body, std::string* md5) const {
    *md5 = digest::Md5(body);
    SK_ASSIGN_OR_RETURN(HttpResponse r, store_->Call(t_, "PUT", query, body,
                                                     {"Content-MD5: " + digest::Base64(*md5)}));
    const std::string etag = r.header("etag");
    if (etag != "\"" + digest::Hex(*md5) + "\"") {
      return Status::IOError(t_.shown + ": the server stored " + std::to_string(body.size()) +
                             " bytes as ETag " + etag + ", not the MD5 sent (" + digest::Hex(*md5) +
                             ")");
    }
    return Status::OK();
  }
  // Starts sending the next part in the background (after the oldest of
  // kPartsInFlight ended); the first error of any part is returned, then.
  Status UploadPart(std::string part) {
    if (upload_id_.empty()) {
      SK_ASSIGN_OR_RETURN(HttpResponse r, store_->Call(t_, "POST", {{"uploads", ""}}, {}, {}));
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
                      &parts_[i]);
    });
    sending_.push_back(std::move(sending));
    return Status::OK();
  }
  // Waits until at most `keep` parts are in flight: the first error, if any.
  Status WaitParts(size_t keep) {
    Status first;
    while (sending_.size() > keep) {
      sending_.front()->thread.join();
      if (first.ok()) first = sending_.front()->status;
      sending_.pop_front();
    }
    if (!first.ok() && parts_status_.ok()) parts_status_ = first;
    return parts_status_;
  }
  Status Finish() {
    std::string md5;
    if (upload_id_.empty()) return Put({}, buffer_, &md5);
    if (!buffer_.empty()) SK_RETURN_IF_ERROR(UploadPart(std::move(buffer_)));
    SK_RETURN_IF_ERROR(WaitParts(0));
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < parts_.size(); ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>\"" +
             digest::Hex(parts_[i]) + "\"</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    SK_ASSIGN_OR_RETURN(HttpResponse r,
                        store_->Call(t_, "POST", {{"uploadId", upload_id_}}, xml, {}));
    upload_id_.clear();  // complete: nothing to abort
    const std::string got = XmlText(XmlField(r.body, "ETag"));
    const std::string want = ObjectETag::OfParts({parts_.begin(), parts_.end()});
    if (!got.empty() && got != want) {
      return Status::IOError(t_.shown + ": the completed upload's ETag is " + got + ", not " +
                             want);
    }
    return Status::OK();
  }

  struct Sending {
    std::string body;
    std::thread thread;
    Status status;
  };
  ObjectStore* const store_;
  const Target t_;
  std::string buffer_, upload_id_;
  // The parts' MD5s (S3 answered each with it as its ETag); a deque, so
  // that a part's thread writes its own element while the next parts are added.
  std::deque<std::string> parts_;
  std::deque<std::unique_ptr<Sending>> sending_;  // oldest first
  Status parts_status_;                           // the first part that failed
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
