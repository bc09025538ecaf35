package cloud

import (
	"errors"

	"github.com/aws/smithy-go"
)

// EC2 error codes ipamd reacts to. The memory cloud returns the same codes,
// so one classification serves both.
const (
	CodeRequestLimitExceeded      = "RequestLimitExceeded"
	CodeThrottling                = "Throttling"
	CodeInsufficientFreeAddresses = "InsufficientFreeAddressesInSubnet"
	CodeInsufficientCidrBlocks    = "InsufficientCidrBlocks"
	CodeENINotFound               = "InvalidNetworkInterfaceID.NotFound"
	CodeENIInUse                  = "InvalidNetworkInterface.InUse"
	CodeAttachmentLimitExceeded   = "AttachmentLimitExceeded"
	CodeIPAddressLimitExceeded    = "PrivateIpAddressLimitExceeded"
)

// ErrorCode returns the API error code inside err ("" if there is none),
// found with errors.As whatever wraps it.
func ErrorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// IsThrottled reports whether EC2 refused the call for its rate limit: the
// caller should back off, not conclude anything about the resource.
func IsThrottled(err error) bool {
	c := ErrorCode(err)
	return c == CodeRequestLimitExceeded || c == CodeThrottling
}

// IsSubnetFull reports whether the subnet has no room for the addresses or
// prefixes asked for: ipamd backs off longer, since retrying soon cannot
// help until pods elsewhere release addresses.
func IsSubnetFull(err error) bool {
	c := ErrorCode(err)
	return c == CodeInsufficientFreeAddresses || c == CodeInsufficientCidrBlocks
}

// IsNotFound reports whether EC2 does not know the ENI (deleted meanwhile,
// or never existed).
func IsNotFound(err error) bool {
	return ErrorCode(err) == CodeENINotFound
}

// isInUse reports whether EC2 refused to delete an ENI that is still
// attached or detaching.
func isInUse(err error) bool {
	return ErrorCode(err) == CodeENIInUse
}

// ErrNoFreeDevice is returned (wrapped) by AllocENI when every device
// number the instance type allows is taken.
var ErrNoFreeDevice = errors.New("no free ENI device number")
