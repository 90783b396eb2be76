package s3gw

import (
	"encoding/xml"
	"net/http"
	"strings"
)

// GetObjectAttributes: HEAD and ListParts of a completed object in one
// request, each attribute only when asked for (x-amz-object-attributes).

type objectAttributes struct {
	XMLName      xml.Name        `xml:"GetObjectAttributesResponse"`
	NS           string          `xml:"xmlns,attr"`
	ETag         string          `xml:"ETag,omitempty"`
	Checksum     *objectSumXML   `xml:"Checksum,omitempty"`
	ObjectParts  *objectPartsXML `xml:"ObjectParts,omitempty"`
	StorageClass string          `xml:"StorageClass,omitempty"`
	ObjectSize   *uint64         `xml:"ObjectSize,omitempty"`
}

type objectSumXML struct {
	checksumXML
	ChecksumType string `xml:"ChecksumType"`
}

type objectPartsXML struct {
	TotalPartsCount      int             `xml:"PartsCount"`
	PartNumberMarker     int             `xml:"PartNumberMarker"`
	NextPartNumberMarker int             `xml:"NextPartNumberMarker,omitempty"`
	MaxParts             int             `xml:"MaxParts"`
	IsTruncated          bool            `xml:"IsTruncated"`
	Parts                []objectPartXML `xml:"Part"`
}

type objectPartXML struct {
	PartNumber int    `xml:"PartNumber"`
	Size       uint64 `xml:"Size"`
	checksumXML
}

// objectAttributeNames are the attributes a request may ask for.
var objectAttributeNames = map[string]bool{"ETag": true, "Checksum": true, "ObjectParts": true, "StorageClass": true, "ObjectSize": true}

func (rq *request) objectAttributes() error {
	want, err := rq.wantedAttributes()
	if err != nil {
		return err
	}
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	e, err := rq.g.readEntry(rq.ctx, b, rq.key)
	if err != nil {
		return err
	}
	res := objectAttributes{NS: s3NS}
	if want["ETag"] {
		res.ETag = e.ETag
	}
	if want["StorageClass"] {
		res.StorageClass = "STANDARD"
	}
	if want["ObjectSize"] {
		res.ObjectSize = &e.Size
	}
	if want["Checksum"] && e.Checksum.Alg != 0 {
		res.Checksum = &objectSumXML{ChecksumType: "FULL_OBJECT"}
		res.Checksum.setChecksum(e.Checksum.Alg, e.Checksum.Sum)
		if e.Checksum.Parts > 0 {
			res.Checksum.ChecksumType = "COMPOSITE"
		}
	}
	if want["ObjectParts"] && e.UploadID != "" {
		if res.ObjectParts, err = rq.objectParts(e); err != nil {
			return err
		}
	}
	rq.w.Header().Set("Last-Modified", e.MTime.UTC().Format(http.TimeFormat))
	return rq.writeXML(http.StatusOK, res)
}

// wantedAttributes reads x-amz-object-attributes: a comma-separated list
// of which at least one is required.
func (rq *request) wantedAttributes() (map[string]bool, error) {
	want := map[string]bool{}
	for _, v := range rq.r.Header.Values("x-amz-object-attributes") {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if !objectAttributeNames[a] {
				return nil, ErrInvalidArgument.with("Unknown object attribute %q: ask for ETag, Checksum, ObjectParts, StorageClass or ObjectSize.", a)
			}
			want[a] = true
		}
	}
	if len(want) == 0 {
		return nil, ErrInvalidArgument.with("The x-amz-object-attributes header specifying the attributes to be retrieved is either missing or empty.")
	}
	return want, nil
}

// objectParts lists the parts of a multipart object after
// x-amz-part-number-marker, at most x-amz-max-parts (1,000 by default).
// As S3 does, the parts themselves are listed only for an object with
// checksums, whose parts were numbered from 1 without gaps; their count
// always.
func (rq *request) objectParts(e *Entry) (*objectPartsXML, error) {
	maxParts, err := parseCount("x-amz-max-parts", rq.r.Header.Get("x-amz-max-parts"), 1000, 1000)
	if err != nil {
		return nil, err
	}
	marker, err := parseCount("x-amz-part-number-marker", rq.r.Header.Get("x-amz-part-number-marker"), 0, maxPartNum)
	if err != nil {
		return nil, err
	}
	op := &objectPartsXML{TotalPartsCount: len(e.Parts), PartNumberMarker: marker, MaxParts: maxParts}
	if e.Checksum.Alg == 0 {
		return op, nil
	}
	for i := marker; i < len(e.Parts); i++ {
		if len(op.Parts) == maxParts {
			op.IsTruncated = true
			break
		}
		p := objectPartXML{PartNumber: i + 1, Size: e.Parts[i].Size}
		p.setChecksum(e.Checksum.Alg, e.Parts[i].Checksum)
		op.Parts = append(op.Parts, p)
		op.NextPartNumberMarker = i + 1
	}
	return op, nil
}
