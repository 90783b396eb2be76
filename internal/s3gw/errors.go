package s3gw

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairn-storage/cairn/internal/s3/sigv4"
)

// Error is an S3 error: the code of its XML body, the HTTP status, and a
// message. Handlers return one; ServeHTTP writes it. Messages never hold a
// secret.
type Error struct {
	Code    string
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is matches another *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// with returns a copy of e with a message of its own.
func (e *Error) with(format string, args ...any) *Error {
	c := *e
	c.Message = fmt.Sprintf(format, args...)
	return &c
}

func s3err(code string, status int, msg string) *Error { return &Error{code, status, msg} }

// The S3 errors the gateway answers with, their statuses as AWS gives them.
var (
	ErrAccessDenied          = s3err("AccessDenied", 403, "Access Denied")
	ErrBadDigest             = s3err("BadDigest", 400, "The Content-MD5 you specified did not match what we received.")
	ErrBucketAlreadyExists   = s3err("BucketAlreadyExists", 409, "The requested bucket name is not available. The bucket namespace is shared by all users of the system. Please select a different name and try again.")
	ErrBucketAlreadyOwned    = s3err("BucketAlreadyOwnedByYou", 409, "Your previous request to create the named bucket succeeded and you already own it.")
	ErrBucketNotEmpty        = s3err("BucketNotEmpty", 409, "The bucket you tried to delete is not empty")
	ErrEntityTooLarge        = s3err("EntityTooLarge", 400, "Your proposed upload exceeds the maximum allowed object size.")
	ErrEntityTooSmall        = s3err("EntityTooSmall", 400, "Your proposed upload is smaller than the minimum allowed object size.")
	ErrIncompleteBody        = s3err("IncompleteBody", 400, "You did not provide the number of bytes specified by the Content-Length HTTP header.")
	ErrInsufficientCapacity  = s3err("InsufficientCapacity", 507, "The cluster has no space for this write.")
	ErrInternal              = s3err("InternalError", 500, "We encountered an internal error. Please try again.")
	ErrInvalidArgument       = s3err("InvalidArgument", 400, "Invalid Argument")
	ErrInvalidBucketName     = s3err("InvalidBucketName", 400, "The specified bucket is not valid.")
	ErrInvalidDigest         = s3err("InvalidDigest", 400, "The Content-MD5 you specified is not valid.")
	ErrInvalidPart           = s3err("InvalidPart", 400, "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.")
	ErrInvalidPartNumber     = s3err("InvalidPartNumber", 416, "The requested partnumber is not satisfiable")
	ErrInvalidPartOrder      = s3err("InvalidPartOrder", 400, "The list of parts was not in ascending order. The parts list must be specified in order by part number.")
	ErrInvalidRange          = s3err("InvalidRange", 416, "The requested range is not satisfiable")
	ErrInvalidRequest        = s3err("InvalidRequest", 400, "Invalid Request")
	ErrKeyTooLong            = s3err("KeyTooLongError", 400, "Your key is too long")
	ErrMalformedXML          = s3err("MalformedXML", 400, "The XML you provided was not well-formed or did not validate against our published schema.")
	ErrMetadataTooLarge      = s3err("MetadataTooLarge", 400, "Your metadata headers exceed the maximum allowed metadata size.")
	ErrMethodNotAllowed      = s3err("MethodNotAllowed", 405, "The specified method is not allowed against this resource.")
	ErrMissingContentLength  = s3err("MissingContentLength", 411, "You must provide the Content-Length HTTP header.")
	ErrNoSuchBucket          = s3err("NoSuchBucket", 404, "The specified bucket does not exist")
	ErrNoSuchKey             = s3err("NoSuchKey", 404, "The specified key does not exist.")
	ErrNoSuchUpload          = s3err("NoSuchUpload", 404, "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.")
	ErrNotImplemented        = s3err("NotImplemented", 501, "A header you provided implies functionality that is not implemented.")
	ErrPreconditionFailed    = s3err("PreconditionFailed", 412, "At least one of the pre-conditions you specified did not hold")
	ErrConditionalConflict   = s3err("ConditionalRequestConflict", 409, "The conditional request cannot succeed due to a conflicting operation against this resource.")
	ErrRequestHeaderTooLarge = s3err("RequestHeaderSectionTooLarge", 400, "Your request header section exceeds the maximum allowed size.")
	ErrSlowDown              = s3err("SlowDown", 503, "Please reduce your request rate.")
	ErrServiceUnavailable    = s3err("ServiceUnavailable", 503, "The service is unavailable. Please retry.")
	ErrMaxMessageLength      = s3err("MaxMessageLengthExceeded", 400, "Your request was too big.")
)

// notModified is not an error body: 304 has none.
var errNotModified = s3err("NotModified", http.StatusNotModified, "Not Modified")

// asS3 turns any error into the *Error to answer with: sigv4's carry their
// code; the cluster's full and unavailable errors say so with the OSD's
// reason (507, which SDKs do not retry: only freeing space helps; 503,
// which they do); anything else is an InternalError (logged by the caller).
func asS3(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	var se *sigv4.Error
	if errors.As(err, &se) {
		return &Error{se.Code, se.Status, se.Message}, true
	}
	switch {
	case errors.Is(err, ErrNoSpace):
		return ErrInsufficientCapacity.with("The cluster has no space for this write: %s", Reason(err, ErrNoSpace)), true
	case errors.Is(err, ErrUnavailable):
		return ErrServiceUnavailable.with("The cluster cannot serve this request now: %s", Reason(err, ErrUnavailable)), true
	}
	return ErrInternal, false
}

// Reason is what follows sentinel in err's text: the cluster's reason
// alone, without the names of the operation and object ahead of it, which
// mean nothing to an S3 client.
func Reason(err, sentinel error) string {
	if _, after, ok := strings.Cut(err.Error(), sentinel.Error()+": "); ok && after != "" {
		return after
	}
	return err.Error()
}

type errorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource,omitempty"`
	RequestID string   `xml:"RequestId"`
}

// writeError answers with e's status and XML body (none for HEAD and 304,
// as S3 does).
func writeError(w http.ResponseWriter, r *http.Request, e *Error, reqID string) {
	h := w.Header()
	h.Del("ETag")
	h.Del("Content-Length")
	if e.Status == http.StatusNotModified {
		w.WriteHeader(e.Status)
		return
	}
	body, _ := xml.Marshal(errorBody{Code: e.Code, Message: e.Message, Resource: r.URL.Path, RequestID: reqID})
	body = append([]byte(xml.Header), body...)
	h.Set("Content-Type", "application/xml")
	if r.Method == http.MethodHead {
		h.Set("x-amz-error-code", e.Code)
		w.WriteHeader(e.Status)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.Status)
	w.Write(body)
}
