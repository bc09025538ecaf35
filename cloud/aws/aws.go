// Package aws builds the real aws-sdk-go-v2 clients behind cloud's seams:
// *ec2.Client as cloud.EC2 and *imds.Client as cloud.Metadata.
package aws

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/vpccni/vpccni/cloud"
)

// The real clients satisfy the seams unchanged.
var (
	_ cloud.EC2      = (*ec2.Client)(nil)
	_ cloud.Metadata = (*imds.Client)(nil)
)

// Options choose where the clients go.
type Options struct {
	// Region of the EC2 endpoint. Empty means the instance's own region,
	// asked from IMDS: the ENIs ipamd manages live there, so a region from
	// the environment or a profile must not redirect it.
	Region string
	// EndpointURL replaces the EC2 endpoint (for a test server or a VPC
	// endpoint). Empty means the region's standard endpoint.
	EndpointURL string
}

// New builds the clients from the SDK's default configuration
// (credentials from the environment, profile or instance role; IMDS
// address from AWS_EC2_METADATA_SERVICE_ENDPOINT if set).
func New(ctx context.Context, opt Options) (cloud.EC2, cloud.Metadata, error) {
	var loadOpts []func(*config.LoadOptions) error
	if opt.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(opt.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	md := imds.NewFromConfig(cfg)
	region := opt.Region
	if region == "" {
		out, err := md.GetRegion(ctx, &imds.GetRegionInput{})
		if err != nil {
			return nil, nil, fmt.Errorf("asking IMDS for the instance's region (give one to run off EC2): %w", err)
		}
		region = out.Region
	}
	api := ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		o.Region = region
		if opt.EndpointURL != "" {
			o.BaseEndpoint = &opt.EndpointURL
		}
	})
	return api, md, nil
}
