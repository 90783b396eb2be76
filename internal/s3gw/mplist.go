package s3gw

import (
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
)

type listPartsResult struct {
	XMLName              xml.Name  `xml:"ListPartsResult"`
	NS                   string    `xml:"xmlns,attr"`
	Bucket               string    `xml:"Bucket"`
	Key                  string    `xml:"Key"`
	UploadID             string    `xml:"UploadId"`
	Initiator            owner     `xml:"Initiator"`
	Owner                owner     `xml:"Owner"`
	StorageClass         string    `xml:"StorageClass"`
	PartNumberMarker     int       `xml:"PartNumberMarker"`
	NextPartNumberMarker int       `xml:"NextPartNumberMarker"`
	MaxParts             int       `xml:"MaxParts"`
	IsTruncated          bool      `xml:"IsTruncated"`
	ChecksumAlgorithm    string    `xml:"ChecksumAlgorithm,omitempty"`
	Parts                []partXML `xml:"Part"`
}

type partXML struct {
	PartNumber   int    `xml:"PartNumber"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         uint64 `xml:"Size"`
	checksumXML
}

// checksumXML is the one checksum element of its algorithm, as parts and
// GetObjectAttributes carry it.
type checksumXML struct {
	ChecksumCRC32     string `xml:"ChecksumCRC32,omitempty"`
	ChecksumCRC32C    string `xml:"ChecksumCRC32C,omitempty"`
	ChecksumCRC64NVME string `xml:"ChecksumCRC64NVME,omitempty"`
	ChecksumSHA1      string `xml:"ChecksumSHA1,omitempty"`
	ChecksumSHA256    string `xml:"ChecksumSHA256,omitempty"`
}

func (p *checksumXML) setChecksum(a checksum.Algorithm, sum []byte) {
	if len(sum) == 0 {
		return
	}
	v := checksum.Encode(sum)
	switch a {
	case checksum.CRC32:
		p.ChecksumCRC32 = v
	case checksum.CRC32C:
		p.ChecksumCRC32C = v
	case checksum.CRC64NVME:
		p.ChecksumCRC64NVME = v
	case checksum.SHA1:
		p.ChecksumSHA1 = v
	case checksum.SHA256:
		p.ChecksumSHA256 = v
	}
}

// intParam reads a non-negative integer query parameter, def when absent.
func (rq *request) intParam(name string, def, limit int) (int, error) {
	return parseCount(name, rq.query.Get(name), def, limit)
}

// parseCount reads v, the non-negative integer value of parameter or
// header name: def when empty, at most limit.
func parseCount(name, v string, def, limit int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, ErrInvalidArgument.with("%s must be a non-negative integer.", name)
	}
	return min(n, limit), nil
}

func (rq *request) listParts() error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	up, err := rq.readUpload(b, rq.query.Get("uploadId"))
	if err != nil {
		return err
	}
	maxParts, err := rq.intParam("max-parts", 1000, 1000)
	if err != nil {
		return err
	}
	marker, err := rq.intParam("part-number-marker", 0, maxPartNum)
	if err != nil {
		return err
	}
	res := listPartsResult{NS: s3NS, Bucket: b.Name, Key: rq.key, UploadID: up.id, Initiator: owner{b.Owner, b.Owner},
		Owner: owner{b.Owner, b.Owner}, StorageClass: "STANDARD", PartNumberMarker: marker, MaxParts: maxParts}
	if a := up.rec.Checksum.Alg; a != 0 {
		res.ChecksumAlgorithm = a.String()
	}
	pp := partPrefix(up.id)
	kvs, more, err := rq.g.cfg.Store.OmapList(rq.ctx, b.shard(rq.key), partKey(up.id, marker+1), pp+"\xff", maxParts)
	if err == nil {
		err = rq.g.checkHolds(rq.ctx, b, rq.key)
	}
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		if kv.Key == sealKey(up.id) {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(kv.Key, pp))
		e, err := decodeEntry(kv.Value)
		if err != nil || len(e.Parts) != 1 {
			return errCorruptRecord
		}
		px := partXML{PartNumber: n, LastModified: isoTime(e.MTime), ETag: `"` + e.ETag + `"`, Size: e.Size}
		px.setChecksum(e.Checksum.Alg, e.Parts[0].Checksum)
		res.Parts = append(res.Parts, px)
		res.NextPartNumberMarker = n
	}
	res.IsTruncated = more && maxParts > 0
	return rq.writeXML(http.StatusOK, res)
}

type listUploadsResult struct {
	XMLName            xml.Name    `xml:"ListMultipartUploadsResult"`
	NS                 string      `xml:"xmlns,attr"`
	Bucket             string      `xml:"Bucket"`
	KeyMarker          string      `xml:"KeyMarker"`
	UploadIDMarker     string      `xml:"UploadIdMarker"`
	NextKeyMarker      string      `xml:"NextKeyMarker,omitempty"`
	NextUploadIDMarker string      `xml:"NextUploadIdMarker,omitempty"`
	Prefix             string      `xml:"Prefix"`
	Delimiter          string      `xml:"Delimiter,omitempty"`
	MaxUploads         int         `xml:"MaxUploads"`
	IsTruncated        bool        `xml:"IsTruncated"`
	Uploads            []uploadXML `xml:"Upload"`
	CommonPrefixes     []prefixXML `xml:"CommonPrefixes"`
}

type uploadXML struct {
	Key          string `xml:"Key"`
	UploadID     string `xml:"UploadId"`
	Initiator    owner  `xml:"Initiator"`
	Owner        owner  `xml:"Owner"`
	StorageClass string `xml:"StorageClass"`
	Initiated    string `xml:"Initiated"`
}

// listUploads lists the uploads in progress: their keys live under
// 0x00 u 0x00 in key then upload-id (creation) order, in the shard of
// their key, so this is a prefix listing of the shards (listAcross).
func (rq *request) listUploads() error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	maxUploads, err := rq.intParam("max-uploads", 1000, 1000)
	if err != nil {
		return err
	}
	prefix, delim := rq.query.Get("prefix"), rq.query.Get("delimiter")
	keyMarker, idMarker := rq.query.Get("key-marker"), rq.query.Get("upload-id-marker")
	if len(prefix) > maxKeyBytes || len(delim) > maxKeyBytes || len(keyMarker) > maxKeyBytes || len(idMarker) > 64 {
		return ErrInvalidArgument.with("prefix, delimiter and markers are at most %d bytes.", maxKeyBytes)
	}
	res := listUploadsResult{NS: s3NS, Bucket: b.Name, KeyMarker: keyMarker, UploadIDMarker: idMarker, Prefix: prefix, Delimiter: delim, MaxUploads: maxUploads}
	after := ""
	switch {
	case idMarker != "":
		after = uploadKey(keyMarker, idMarker)
	case keyMarker != "":
		after = prefixUpload + keyMarker + "\x00\xff"
	}
	if maxUploads == 0 {
		return rq.writeXML(http.StatusOK, res)
	}
	l, err := rq.g.listAcross(rq.ctx, b, acrossQuery{prefix: prefixUpload + prefix, delim: delim, after: after, limit: maxUploads,
		keyOf: func(k string) string { return strings.TrimPrefix(k, prefixUpload) }})
	if err != nil {
		return err
	}
	for _, kv := range l.Entries {
		key, id, ok := strings.Cut(strings.TrimPrefix(kv.Key, prefixUpload), "\x00")
		e, err := decodeEntry(kv.Value)
		if !ok || err != nil {
			continue
		}
		res.Uploads = append(res.Uploads, uploadXML{key, id, owner{b.Owner, b.Owner}, owner{b.Owner, b.Owner}, "STANDARD", isoTime(e.MTime)})
		res.NextKeyMarker, res.NextUploadIDMarker = key, id
	}
	for _, cp := range l.Prefixes {
		res.CommonPrefixes = append(res.CommonPrefixes, prefixXML{strings.TrimPrefix(cp, prefixUpload)})
	}
	res.IsTruncated = l.More
	return rq.writeXML(http.StatusOK, res)
}
