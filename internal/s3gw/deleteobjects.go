package s3gw

import (
	"encoding/xml"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"
)

// deleteRequest is the body of DeleteObjects.
type deleteRequest struct {
	XMLName xml.Name `xml:"Delete"`
	Quiet   bool     `xml:"Quiet"`
	Objects []struct {
		Key       string `xml:"Key"`
		VersionID string `xml:"VersionId"`
	} `xml:"Object"`
}

type deleteResult struct {
	XMLName xml.Name       `xml:"DeleteResult"`
	NS      string         `xml:"xmlns,attr"`
	Deleted []deletedXML   `xml:"Deleted"`
	Errors  []deleteErrXML `xml:"Error"`
}

type deletedXML struct {
	Key string `xml:"Key"`
}

type deleteErrXML struct {
	Key     string `xml:"Key"`
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

// maxDeleteKeys is S3's limit of keys per DeleteObjects.
const maxDeleteKeys = 1000

// parseDelete decodes and checks a DeleteObjects body (fuzzed).
func parseDelete(body []byte) (*deleteRequest, error) {
	var req deleteRequest
	if err := xml.Unmarshal(body, &req); err != nil {
		return nil, ErrMalformedXML
	}
	if len(req.Objects) == 0 || len(req.Objects) > maxDeleteKeys {
		return nil, ErrMalformedXML.with("DeleteObjects takes 1 to %d keys; this request has %d.", maxDeleteKeys, len(req.Objects))
	}
	return &req, nil
}

func keyProblem(key string) *Error {
	switch {
	case key == "":
		return ErrInvalidArgument.with("The key is empty.")
	case len(key) > maxKeyBytes:
		return ErrKeyTooLong
	case strings.IndexByte(key, 0) >= 0 || !utf8.ValidString(key):
		return ErrInvalidArgument.with("Object keys must be UTF-8 without NUL.")
	}
	return nil
}

func (rq *request) deleteObjects() error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	body, err := readAllBounded(rq.auth.Body, maxXMLBytes)
	if err != nil {
		return err
	}
	req, err := parseDelete(body)
	if err != nil {
		return err
	}
	res := deleteResult{NS: s3NS}
	for _, o := range req.Objects {
		var e *Error
		if e = keyProblem(o.Key); e == nil && o.VersionID != "" && o.VersionID != "null" {
			e = ErrNotImplemented.with("Versions are not implemented.")
		}
		if e == nil {
			if err := rq.g.deleteKey(rq.ctx, b, o.Key, conditions{}); err != nil {
				var known bool
				if e, known = asS3(err); !known {
					rq.g.cfg.Logf("s3: DeleteObjects %s/%s: %v", b.Name, o.Key, err)
				}
				if errors.Is(err, ErrNoSuchBucket) {
					return err
				}
			}
		}
		if e != nil {
			res.Errors = append(res.Errors, deleteErrXML{o.Key, e.Code, e.Message})
		} else if !req.Quiet {
			res.Deleted = append(res.Deleted, deletedXML{o.Key})
		}
	}
	return rq.writeXML(http.StatusOK, res)
}
