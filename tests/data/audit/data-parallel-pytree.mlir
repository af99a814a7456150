module @jit_body attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=16]> {stablehlo.mesh = {axes = [{name = "data", size = 16 : i64}]}}
  func.func public @main(%arg0: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg1: tensor<4x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg2: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg3: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg4: tensor<32x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}) -> (tensor<4xf32> {jax.result_info = "result[0]['b']"}, tensor<4x4xf32> {jax.result_info = "result[0]['layers'][0]"}, tensor<8x4xf32> {jax.result_info = "result[0]['w']"}, tensor<f32> {jax.result_info = "result[1]"}) {
    %0:4 = sdy.manual_computation(%arg0, %arg1, %arg2, %arg3, %arg4) in_shardings=[<@mesh, [{}]>, <@mesh, [{}, {}]>, <@mesh, [{}, {}]>, <@mesh, [{"data"}, {}]>, <@mesh, [{"data"}, {}]>] out_shardings=[<@mesh, [{}]>, <@mesh, [{}, {}]>, <@mesh, [{}, {}]>, <@mesh, []>] manual_axes={"data"} (%arg5: tensor<4xf32>, %arg6: tensor<4x4xf32>, %arg7: tensor<8x4xf32>, %arg8: tensor<2x8xf32>, %arg9: tensor<2x4xf32>) {
      %1 = stablehlo.dot_general %arg8, %arg7, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
      %2 = stablehlo.broadcast_in_dim %arg5, dims = [1] : (tensor<4xf32>) -> tensor<1x4xf32>
      %3 = stablehlo.broadcast_in_dim %2, dims = [0, 1] : (tensor<1x4xf32>) -> tensor<2x4xf32>
      %4 = stablehlo.add %1, %3 : tensor<2x4xf32>
      %5 = stablehlo.dot_general %4, %arg6, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
      %6 = stablehlo.multiply %5, %arg9 : tensor<2x4xf32>
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %7 = stablehlo.reduce(%6 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x4xf32>, tensor<f32>) -> tensor<f32>
      %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
      %8 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x4xf32>
      %9 = stablehlo.multiply %8, %arg9 : tensor<2x4xf32>
      %10 = stablehlo.dot_general %9, %4, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
      %11 = stablehlo.transpose %10, dims = [1, 0] : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %12 = stablehlo.dot_general %9, %arg6, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
      %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %13 = stablehlo.reduce(%12 init: %cst_1) applies stablehlo.add across dimensions = [0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<4xf32>
      %14 = stablehlo.reshape %13 : (tensor<4xf32>) -> tensor<1x4xf32>
      %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %15 = stablehlo.reduce(%14 init: %cst_2) applies stablehlo.add across dimensions = [0] : (tensor<1x4xf32>, tensor<f32>) -> tensor<4xf32>
      %16 = stablehlo.dot_general %12, %arg8, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x4xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
      %17 = stablehlo.transpose %16, dims = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
      %18 = "stablehlo.all_reduce"(%15) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %25 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %25 : tensor<f32>
      }) : (tensor<4xf32>) -> tensor<4xf32>
      %19 = "stablehlo.all_reduce"(%11) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %25 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %25 : tensor<f32>
      }) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %20 = "stablehlo.all_reduce"(%17) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %25 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %25 : tensor<f32>
      }) : (tensor<8x4xf32>) -> tensor<8x4xf32>
      %21 = stablehlo.subtract %arg5, %18 : tensor<4xf32>
      %22 = stablehlo.subtract %arg6, %19 : tensor<4x4xf32>
      %23 = stablehlo.subtract %arg7, %20 : tensor<8x4xf32>
      %24 = "stablehlo.all_reduce"(%7) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %25 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %25 : tensor<f32>
      }) : (tensor<f32>) -> tensor<f32>
      sdy.return %21, %22, %23, %24 : tensor<4xf32>, tensor<4x4xf32>, tensor<8x4xf32>, tensor<f32>
    } : (tensor<4xf32>, tensor<4x4xf32>, tensor<8x4xf32>, tensor<32x8xf32>, tensor<32x4xf32>) -> (tensor<4xf32>, tensor<4x4xf32>, tensor<8x4xf32>, tensor<f32>)
    return %0#0, %0#1, %0#2, %0#3 : tensor<4xf32>, tensor<4x4xf32>, tensor<8x4xf32>, tensor<f32>
  }
}
